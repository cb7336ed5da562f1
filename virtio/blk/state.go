package blk

import (
	"fmt"
	"sync/atomic"
)

// State is the block device's part of a VM snapshot. The queue's positions
// belong to the transport's queue state; the data lives in the image. What
// is left is what identifies the disk to the guest and the counters.
type State struct {
	Sectors  uint64 // capacity the guest saw; a restore needs the same
	ReadOnly bool
	Serial   string
	Stats    Stats
}

// Stats counts the device's requests since it was created. They survive
// Reset (they describe the device, not one driver session).
type Stats struct {
	Reads, Writes, Flushes, Discards, WriteZeroes, GetIDs uint64
	BytesRead, BytesWritten                               uint64
	// IOErrors and Unsupported count requests answered with
	// VIRTIO_BLK_S_IOERR and VIRTIO_BLK_S_UNSUPP.
	IOErrors, Unsupported uint64
	// Malformed counts chains that could not be answered at all (broken
	// descriptors, no status byte).
	Malformed uint64
	// InterruptErrors counts failures to signal the driver.
	InterruptErrors uint64
}

// stats is Stats as the worker updates it while others read it.
type stats struct {
	reads, writes, flushes, discards, writeZeroes, getIDs atomic.Uint64
	bytesRead, bytesWritten                               atomic.Uint64
	ioErrors, unsupported, malformed, interruptErrors     atomic.Uint64
}

func (s *stats) snapshot() Stats {
	return Stats{
		Reads: s.reads.Load(), Writes: s.writes.Load(), Flushes: s.flushes.Load(),
		Discards: s.discards.Load(), WriteZeroes: s.writeZeroes.Load(), GetIDs: s.getIDs.Load(),
		BytesRead: s.bytesRead.Load(), BytesWritten: s.bytesWritten.Load(),
		IOErrors: s.ioErrors.Load(), Unsupported: s.unsupported.Load(),
		Malformed: s.malformed.Load(), InterruptErrors: s.interruptErrors.Load(),
	}
}

func (s *stats) restore(v Stats) {
	s.reads.Store(v.Reads)
	s.writes.Store(v.Writes)
	s.flushes.Store(v.Flushes)
	s.discards.Store(v.Discards)
	s.writeZeroes.Store(v.WriteZeroes)
	s.getIDs.Store(v.GetIDs)
	s.bytesRead.Store(v.BytesRead)
	s.bytesWritten.Store(v.BytesWritten)
	s.ioErrors.Store(v.IOErrors)
	s.unsupported.Store(v.Unsupported)
	s.malformed.Store(v.Malformed)
	s.interruptErrors.Store(v.InterruptErrors)
}

// Stats returns the counters so far.
func (d *Device) Stats() Stats { return d.stats.snapshot() }

// State returns the device's snapshot state. It may be called at any time;
// a consistent snapshot pauses the VM (and so the driver) first.
func (d *Device) State() State {
	return State{
		Sectors:  d.disk.Sectors(),
		ReadOnly: d.disk.ReadOnly(),
		Serial:   d.Serial(),
		Stats:    d.stats.snapshot(),
	}
}

// Restore loads a snapshot's state into a device that is not active. The
// disk must look the same to the guest as when the snapshot was taken (same
// capacity and mode), or the guest's view of it would be wrong.
func (d *Device) Restore(s State) error {
	if d.Active() {
		return fmt.Errorf("blk: restore into an active device")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.Sectors != d.disk.Sectors() {
		return fmt.Errorf("blk: restore: disk %s has %d sectors, the snapshot expects %d", d.disk.Path(), d.disk.Sectors(), s.Sectors)
	}
	if s.ReadOnly != d.disk.ReadOnly() {
		return fmt.Errorf("blk: restore: disk %s read-only=%v, the snapshot expects read-only=%v", d.disk.Path(), d.disk.ReadOnly(), s.ReadOnly)
	}
	if err := validSerial(s.Serial); err != nil {
		return fmt.Errorf("blk: restore: %w", err)
	}
	d.serial = s.Serial
	d.stats.restore(s.Stats)
	return nil
}

package balloon

import (
	"errors"
	"sync/atomic"
	"time"
)

// Counters count the device's work since it was created, for observability.
// They survive resets: they describe the device, not one driver session.
type Counters struct {
	// InflatedPages and DeflatedPages count valid page frame numbers in
	// inflate and deflate requests.
	InflatedPages, DeflatedPages uint64
	// InflateDiscardedBytes and ReportDiscardedBytes count host memory
	// given back by discarding inflated pages and reported free ranges.
	InflateDiscardedBytes, ReportDiscardedBytes uint64
	// ReportedRanges counts valid free page report ranges.
	ReportedRanges uint64
	// RejectedPages counts page frame numbers outside guest RAM;
	// RejectedRanges counts reported ranges that were unaligned, empty,
	// device-readable or outside guest RAM. Neither was discarded.
	RejectedPages, RejectedRanges uint64
	// Malformed counts chains that broke the virtqueue or balloon protocol
	// (and were returned unprocessed where they could be).
	Malformed uint64
	// DiscardErrors counts discards the host refused.
	DiscardErrors uint64
	// StatsUpdates counts statistics buffers received.
	StatsUpdates uint64
	// InterruptErrors counts failures to signal the driver.
	InterruptErrors uint64
}

// DiscardedBytes is all host memory the device gave back.
func (c Counters) DiscardedBytes() uint64 { return c.InflateDiscardedBytes + c.ReportDiscardedBytes }

// counters is Counters as the worker updates it while others read it.
type counters struct {
	inflatedPages, deflatedPages      atomic.Uint64
	inflateDiscarded, reportDiscarded atomic.Uint64
	reportedRanges                    atomic.Uint64
	rejectedPages, rejectedRanges     atomic.Uint64
	malformed, discardErrors          atomic.Uint64
	statsUpdates, interruptErrors     atomic.Uint64
}

func (c *counters) snapshot() Counters {
	return Counters{
		InflatedPages: c.inflatedPages.Load(), DeflatedPages: c.deflatedPages.Load(),
		InflateDiscardedBytes: c.inflateDiscarded.Load(), ReportDiscardedBytes: c.reportDiscarded.Load(),
		ReportedRanges: c.reportedRanges.Load(),
		RejectedPages:  c.rejectedPages.Load(), RejectedRanges: c.rejectedRanges.Load(),
		Malformed: c.malformed.Load(), DiscardErrors: c.discardErrors.Load(),
		StatsUpdates: c.statsUpdates.Load(), InterruptErrors: c.interruptErrors.Load(),
	}
}

func (c *counters) restore(v Counters) {
	c.inflatedPages.Store(v.InflatedPages)
	c.deflatedPages.Store(v.DeflatedPages)
	c.inflateDiscarded.Store(v.InflateDiscardedBytes)
	c.reportDiscarded.Store(v.ReportDiscardedBytes)
	c.reportedRanges.Store(v.ReportedRanges)
	c.rejectedPages.Store(v.RejectedPages)
	c.rejectedRanges.Store(v.RejectedRanges)
	c.malformed.Store(v.Malformed)
	c.discardErrors.Store(v.DiscardErrors)
	c.statsUpdates.Store(v.StatsUpdates)
	c.interruptErrors.Store(v.InterruptErrors)
}

// State is the balloon's part of a VM snapshot. Queue positions belong to
// the transport's state; the pages themselves to the memory image, where
// discarded pages are holes.
type State struct {
	TargetPages uint32 // num_pages, set by the host
	ActualPages uint32 // actual, written by the driver
	PoisonVal   uint32 // poison_val, written by the driver
	Counters    Counters
	// Stats and StatsTime are the latest guest statistics; StatsTime is
	// zero if none arrived.
	Stats     Stats
	StatsTime time.Time
	// StatsBufferHeld says the device held the driver's stats buffer, at
	// StatsBufferHead, which the restored device must return on the next
	// request or the guest never sends statistics again.
	StatsBufferHeld bool
	StatsBufferHead uint16
}

// State returns the device's snapshot state. A consistent snapshot pauses
// the VM (and so the driver) first.
func (d *Device) State() State {
	d.mu.Lock()
	cfg := d.cfg
	d.mu.Unlock()
	st := State{
		TargetPages: cfg.numPages,
		ActualPages: cfg.actual,
		PoisonVal:   cfg.poisonVal,
		Counters:    d.counters.snapshot(),
	}
	st.Stats, st.StatsTime, _ = d.stats.get()
	if h := d.stats.heldHead(); h >= 0 {
		st.StatsBufferHeld, st.StatsBufferHead = true, uint16(h)
	}
	return st
}

// Restore loads a snapshot's state into a device that is not active, before
// the transport's Restore activates it. The reset the transport performs
// first keeps what Restore set; the next activation takes over the stats
// buffer the snapshot says the device held.
func (d *Device) Restore(st State) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.worker != nil {
		return errors.New("balloon: restore into an active device")
	}
	d.cfg = config{numPages: st.TargetPages, actual: st.ActualPages, poisonVal: st.PoisonVal}
	d.counters.restore(st.Counters)
	if !st.StatsTime.IsZero() {
		d.stats.publish(st.Stats, st.StatsTime)
	}
	d.restoredHead = -1
	if st.StatsBufferHeld {
		d.restoredHead = int(st.StatsBufferHead)
	}
	d.restoring = true
	return nil
}

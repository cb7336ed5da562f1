package net

import (
	"fmt"
	"sync/atomic"

	"github.com/smolvm/smol/virtio"
)

// State is the network device's part of a VM snapshot: what identifies the
// NIC to the guest, what was negotiated, and the counters. The queues'
// positions belong to the transport's queue state.
//
// A frame the worker had read but not finished delivering (its tail waiting
// for receive buffers) is not part of it: like a frame lost on the wire,
// the guest's protocols recover.
type State struct {
	MAC        [6]byte
	MTU        uint16 // 0: VIRTIO_NET_F_MTU not offered
	LinkUp     bool
	Offered    uint64 // device feature bits offered
	Negotiated uint64 // features of the last activation (0 before any)
	Stats      Stats
}

// Stats counts the device's traffic since it was created. They survive
// Reset (they describe the device, not one driver session).
type Stats struct {
	RxFrames, RxBytes uint64 // delivered to the guest (bytes without headers)
	TxFrames, TxBytes uint64 // handed to the backend
	// RxDropped counts frames from the backend the guest could not take:
	// longer than its buffers (or MaxFrameLen), shorter than an Ethernet
	// header, or with offloads the driver did not accept.
	RxDropped uint64
	// RxNoBuffers counts the times the device stopped reading the backend
	// because the driver had no receive buffers (back-pressure).
	RxNoBuffers uint64
	// TxDropped counts frames from the guest the device refused: bad
	// header, too short, longer than MaxFrameLen, too many buffers.
	TxDropped uint64
	// Malformed counts descriptor chains that break the virtio rules.
	Malformed uint64
	// BackendErrors counts failed reads and writes of the backend.
	BackendErrors uint64
	// InterruptErrors counts failures to signal the driver.
	InterruptErrors uint64
}

// stats is Stats as the worker updates it while others read it.
type stats struct {
	rxFrames, rxBytes, txFrames, txBytes         atomic.Uint64
	rxDropped, rxNoBuffers, txDropped, malformed atomic.Uint64
	backendErrors, interruptErrors               atomic.Uint64
}

func (s *stats) snapshot() Stats {
	return Stats{
		RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(),
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(),
		RxDropped: s.rxDropped.Load(), RxNoBuffers: s.rxNoBuffers.Load(),
		TxDropped: s.txDropped.Load(), Malformed: s.malformed.Load(),
		BackendErrors: s.backendErrors.Load(), InterruptErrors: s.interruptErrors.Load(),
	}
}

func (s *stats) restore(v Stats) {
	s.rxFrames.Store(v.RxFrames)
	s.rxBytes.Store(v.RxBytes)
	s.txFrames.Store(v.TxFrames)
	s.txBytes.Store(v.TxBytes)
	s.rxDropped.Store(v.RxDropped)
	s.rxNoBuffers.Store(v.RxNoBuffers)
	s.txDropped.Store(v.TxDropped)
	s.malformed.Store(v.Malformed)
	s.backendErrors.Store(v.BackendErrors)
	s.interruptErrors.Store(v.InterruptErrors)
}

// Stats returns the counters so far.
func (d *Device) Stats() Stats { return d.stats.snapshot() }

// State returns the device's snapshot state. It may be called at any time;
// a consistent snapshot pauses the VM first.
func (d *Device) State() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return State{
		MAC:        d.mac,
		MTU:        d.mtu,
		LinkUp:     d.linkUp,
		Offered:    d.features,
		Negotiated: d.negotiated,
		Stats:      d.stats.snapshot(),
	}
}

// Restore loads a snapshot's state into a device that is not active. The
// backend must honour every feature the guest negotiated, or the restored
// driver would send or expect frames the backend cannot handle.
func (d *Device) Restore(s State) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Active() {
		return fmt.Errorf("virtio-net: restore into an active device")
	}
	if err := validMAC(s.MAC); err != nil {
		return fmt.Errorf("virtio-net: restore: %w", err)
	}
	features := d.features &^ FeatureMTU
	if s.MTU != 0 {
		features |= FeatureMTU
	}
	const transport = virtio.FeatureVersion1 | virtio.FeatureRingIndirectDesc | virtio.FeatureRingEventIdx | virtio.FeatureAccessPlatform
	if missing := s.Negotiated &^ (features | transport); missing != 0 {
		return fmt.Errorf("virtio-net: restore: the backend cannot honour negotiated features %#x", missing)
	}
	d.mac, d.mtu, d.linkUp, d.negotiated, d.features = s.MAC, s.MTU, s.LinkUp, s.Negotiated, features
	d.config = buildConfig(d.mac, d.linkUp, d.mtu)
	d.stats.restore(s.Stats)
	return nil
}

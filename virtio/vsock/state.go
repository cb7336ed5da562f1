package vsock

import "fmt"

// State is the vsock device's part of a VM snapshot. Connections are not in
// it: they are host sockets, which a snapshot cannot carry. A restored guest
// is instead told that the transport reset (see Restore).
type State struct {
	// CID is the guest's context ID; the guest kernel has it cached, so a
	// restored VM must keep it.
	CID uint64
}

// State returns the device's snapshot state.
func (d *Device) State() State {
	return State{CID: d.CID()}
}

// Restore applies a snapshot's state to an inactive device and arranges for
// the next activation to start with VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, so
// the guest drops connections whose host ends did not survive.
func (d *Device) Restore(s State) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w != nil {
		return fmt.Errorf("vsock: restore: device is active")
	}
	cfg := d.cfg
	cfg.CID = s.CID
	cfg, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("vsock: restore: %w", err)
	}
	d.cfg = cfg
	d.cid.Store(cfg.CID)
	d.resetOnActivate = true
	return nil
}

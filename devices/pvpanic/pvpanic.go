// Package pvpanic is the paravirtual panic device (QEMU's pvpanic, ACPI ID
// QEMU0001): one I/O port that the guest kernel writes when it panics, so
// the VMM can report a crash instead of seeing only the reboot that follows.
package pvpanic

import "sync/atomic"

// Port is the device's I/O port, QEMU's choice, which the DSDT announces.
const Port = 0x505

// Events, as bits of the byte the guest writes (and of the capability byte
// it reads).
const (
	Panicked     = 1 << 0 // the kernel panicked
	CrashLoaded  = 1 << 1 // a crash kernel (kdump) is taking over
	capabilities = Panicked | CrashLoaded
)

// Device implements devices.Device on the one port.
type Device struct {
	onPanic func()
	events  atomic.Uint32 // every event bit the guest has written
}

// State is the device's saved state.
type State struct{ Events uint8 }

// New returns the device; onPanic runs on the vCPU thread that reported the
// panic, so it must only ask the VMM to stop and return.
func New(onPanic func()) *Device { return &Device{onPanic: onPanic} }

// Read returns the events the device supports: Linux reads it to learn
// which events it may report.
func (d *Device) Read(offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
	}
	if offset == 0 && len(data) > 0 {
		data[0] = capabilities
	}
}

// Write records reported events and calls onPanic for a panic. A crash
// kernel being loaded is recorded only: the guest goes on running it.
func (d *Device) Write(offset uint64, data []byte) {
	if offset != 0 || len(data) == 0 {
		return
	}
	ev := uint32(data[0] & capabilities)
	d.events.Or(ev)
	if ev&Panicked != 0 && d.onPanic != nil {
		d.onPanic()
	}
}

// Events returns every event bit the guest has reported.
func (d *Device) Events() uint8 { return uint8(d.events.Load()) }

// State returns the device's state for a snapshot.
func (d *Device) State() State { return State{Events: d.Events()} }

// Restore puts back a saved state.
func (d *Device) Restore(s State) error {
	d.events.Store(uint32(s.Events & capabilities))
	return nil
}

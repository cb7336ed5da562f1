// Package portb is the PC's System Control Port B (I/O port 0x61) reduced to
// what a guest without a PIT or PC speaker may still read there: no NMI
// source pending and the timer-2 output high.
//
// Linux reads the port for the reason of an NMI it cannot place elsewhere
// (bit 7: memory parity or PCI SERR, bit 6: I/O channel check) and, only
// when it has no better clock, to calibrate the TSC against PIT timer 2
// (bit 5). An unclaimed port reads as all ones, which would report both NMI
// errors; KVM's in-kernel PIT answers the port itself, so the VMM needs this
// device only without one (the split irqchip).
package portb

// Port is the I/O port the device answers.
const Port = 0x61

// timer2Output is bit 5: the PIT's channel 2 output, high, so that a
// calibration loop waiting for it ends at once rather than never.
const timer2Output = 1 << 5

// Device is the port. It has no state: writes (speaker gate, NMI clears)
// are accepted and forgotten.
type Device struct{}

// New returns the device.
func New() *Device { return &Device{} }

// Read implements devices.Device.
func (*Device) Read(offset uint64, data []byte) {
	clear(data)
	if offset == 0 && len(data) > 0 {
		data[0] = timer2Output
	}
}

// Write implements devices.Device.
func (*Device) Write(offset uint64, data []byte) {}

package power

// I/O ports of the three registers, one byte each, and the value that
// requests a reset. They sit in the legacy VGA range (0x3c0-0x3df), which
// smol never emulates. The device is registered as one range of PortCount
// ports starting at SleepControlPort.
const (
	SleepControlPort = 0x3c0
	SleepStatusPort  = 0x3c1
	ResetPort        = 0x3c2
	PortCount        = 3

	// ResetValue is the byte written to ResetPort to reboot; the FADT
	// announces it as RESET_VALUE.
	ResetValue = 0x1

	// SleepTypeS5 is the SLP_TYP of soft off, the value the DSDT's \_S5
	// object must declare.
	SleepTypeS5 = 5
)

// Sleep control register fields (ACPI 6.x, section 4.8.3.7).
const (
	sleepTypeShift = 2
	sleepTypeMask  = 0x7 << sleepTypeShift // SLP_TYP, bits 2-4
	sleepEnable    = 1 << 5                // SLP_EN: enter the sleep state now
)

const (
	sleepControlOffset = SleepControlPort - SleepControlPort
	sleepStatusOffset  = SleepStatusPort - SleepControlPort
	resetOffset        = ResetPort - SleepControlPort
)

// Device is the power management register block. It implements
// devices.Device.
type Device struct {
	onPowerOff func()
	onReset    func()
}

// State is the device's saved state. The registers hold nothing between
// accesses (the status register always reads 0 and the other two act on
// write), so there is nothing to save; State exists so that snapshots treat
// every device alike.
type State struct{}

// New returns the register block. onPowerOff runs when the guest enters S5,
// onReset when it writes ResetValue to the reset register. Both run on the
// vCPU thread that wrote the register, so they must only ask the VMM to stop
// or reset the VM and return; a guest may write the register again before
// the VMM has acted, so they must tolerate repeated calls. nil ignores the
// request.
func New(onPowerOff, onReset func()) *Device {
	return &Device{onPowerOff: onPowerOff, onReset: onReset}
}

// Read implements devices.Device. The sleep status register reads 0: WAK_STS
// is never set because the VM never wakes from a sleep state. The other
// registers are write-only and read 0 as well.
func (d *Device) Read(offset uint64, data []byte) {
	fill := byte(0)
	if offset >= PortCount {
		fill = 0xff
	}
	for i := range data {
		data[i] = fill
	}
}

// Write implements devices.Device. Registers are one byte wide; a wider
// write is taken by its low byte, as the FADT's register width allows.
// Writes to the sleep status register (clearing WAK_STS) have nothing to
// clear.
func (d *Device) Write(offset uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	v := data[0]
	switch offset {
	case sleepControlOffset:
		if v&sleepEnable != 0 && (v&sleepTypeMask)>>sleepTypeShift == SleepTypeS5 && d.onPowerOff != nil {
			d.onPowerOff()
		}
	case resetOffset:
		if v == ResetValue && d.onReset != nil {
			d.onReset()
		}
	}
}

// State returns the device's state (there is none; see State).
func (d *Device) State() State { return State{} }

// Restore restores the device's state (there is none; see State).
func (d *Device) Restore(State) error { return nil }

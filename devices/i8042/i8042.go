package i8042

import "sync/atomic"

// Port addresses. The controller's registers are at offsets 0 and 4 from
// DataPort; a VMM registers the two ports one by one, since System Control
// Port B (0x61) sits between them.
const (
	DataPort   = 0x60
	StatusPort = 0x64 // reads: status; writes: commands

	dataOffset   = DataPort - DataPort
	statusOffset = StatusPort - DataPort
)

// CommandPulseReset is the command Linux writes to reboot. Commands 0xF0 to
// 0xFF pulse the bits of the controller's output port whose bit in the
// command is 0; output port bit 0 is wired to the CPU's reset line on a PC,
// so every even command in that range resets, and 0xFE pulses nothing else.
const CommandPulseReset = 0xfe

// pulsesReset reports whether command pulses output port bit 0.
func pulsesReset(command byte) bool { return command&0xf1 == 0xf0 }

// Controller is the minimal 8042: it implements devices.Device and calls a
// reset callback when the guest pulses the reset line.
type Controller struct {
	onReset func()
	resets  atomic.Uint64
}

// State is the controller's saved state. The controller keeps no
// guest-visible state: every register reads as a constant and commands have
// no lasting effect. State exists so that snapshots treat every device alike.
type State struct{}

// New returns a controller that calls onReset when the guest asks for a
// reset. onReset runs on the vCPU thread that wrote the command, so it must
// only ask the VMM to reset or stop the VM and return. Linux repeats the
// command several times if the machine has not reset yet, so onReset must
// tolerate being called again. A nil onReset ignores resets.
func New(onReset func()) *Controller {
	return &Controller{onReset: onReset}
}

// Read implements devices.Device. Status reads 0: no byte waiting for the
// guest, input buffer empty (ready for a command). Data reads 0. Any other
// offset reads as all ones (an unclaimed port).
func (c *Controller) Read(offset uint64, data []byte) {
	fill := byte(0xff)
	if offset == dataOffset || offset == statusOffset {
		fill = 0
	}
	for i := range data {
		data[i] = fill
	}
}

// Write implements devices.Device. Only commands that pulse the reset line
// have an effect.
func (c *Controller) Write(offset uint64, data []byte) {
	if offset != statusOffset || len(data) != 1 || !pulsesReset(data[0]) {
		return
	}
	c.resets.Add(1)
	if c.onReset != nil {
		c.onReset()
	}
}

// Resets returns how many times the guest has pulsed the reset line.
func (c *Controller) Resets() uint64 { return c.resets.Load() }

// State returns the controller's state (there is none; see State).
func (c *Controller) State() State { return State{} }

// Restore restores the controller's state (there is none; see State).
func (c *Controller) Restore(State) error { return nil }

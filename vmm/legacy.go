package vmm

import (
	"fmt"
	"io"
	"time"

	"github.com/smolvm/smol/devices"
	"github.com/smolvm/smol/devices/boottimer"
	"github.com/smolvm/smol/devices/i8042"
	"github.com/smolvm/smol/devices/power"
	"github.com/smolvm/smol/devices/pvpanic"
	"github.com/smolvm/smol/devices/serial"
	"github.com/smolvm/smol/vmm/acpi"
)

// legacyDevices are the PC devices every smol VM has: the serial console,
// the keyboard controller's reset line, the ACPI power registers and the
// boot timer.
type legacyDevices struct {
	uart      *serial.UART
	uartIRQ   *irqLine
	input     *serial.InputPump
	bootTimer *bootTimer
}

// bootTimer adapts boottimer.Timer to the zero-time convention of the API.
type bootTimer struct{ *boottimer.Timer }

func (b bootTimer) Reached() time.Time {
	at, ok := b.Timer.Reached()
	if !ok {
		return time.Time{}
	}
	return at
}

func (m *Machine) addLegacyDevices() (*legacyDevices, error) {
	irq, err := newIRQLine(m.vm, serial.COM1IRQ)
	if err != nil {
		return nil, err
	}
	d := &legacyDevices{uartIRQ: irq}
	d.uart = serial.New(irq, m.cfg.Console)
	d.bootTimer = &bootTimer{boottimer.New(nil)}
	poweroff := func() { m.stop(StopPoweroff, nil) }
	panicked := func() {
		m.stop(StopCrash, &CrashError{VCPU: -1, What: "the guest kernel panicked (see its console output)"})
	}
	reset := func() { m.stop(StopReboot, nil) }
	// The 8042 answers its data and status ports; port B (0x61) between
	// them is KVM's PIT's or, with the split irqchip, devices/portb's.
	keyboard := i8042.New(reset)
	for _, r := range []struct {
		kind       string
		base, size uint64
		gsi        uint32
		dev        devices.Device
	}{
		{"serial", serial.COM1Port, serial.RegisterCount, serial.COM1IRQ, d.uart},
		{"i8042", i8042.DataPort, 1, 0, keyboard},
		{"i8042", i8042.StatusPort, 1, 0, shifted{keyboard, i8042.StatusPort - i8042.DataPort}},
		{"power", power.SleepControlPort, power.PortCount, 0, power.New(poweroff, reset)},
		{"boot-timer", boottimer.Port, 1, 0, d.bootTimer.Timer},
		{"pvpanic", pvpanic.Port, 1, 0, pvpanic.New(panicked)},
	} {
		if err := m.pio.Register(r.base, r.size, r.dev); err != nil {
			d.close()
			return nil, err
		}
		m.deviceInfo = append(m.deviceInfo, DeviceInfo{Kind: r.kind, Bus: "pio", Addr: r.base, Size: r.size, GSI: r.gsi})
	}
	return d, nil
}

// acpiConfig describes the machine to the ACPI tables: CPUs, the power
// registers, and the devices Linux must find through the DSDT.
func acpiConfig(cpus, virtioDevices int, irqchip IRQChip) acpi.Config {
	return acpi.Config{
		CPUs:             cpus,
		LegacyPIC:        irqchip == IRQChipKernel,
		SleepControlPort: power.SleepControlPort,
		SleepStatusPort:  power.SleepStatusPort,
		ResetPort:        power.ResetPort,
		ResetValue:       power.ResetValue,
		// Hardware-reduced ACPI has no legacy PIC, so Linux maps no ISA IRQ
		// by number: the UART's interrupt must be described in the DSDT.
		Serial:     []acpi.SerialPort{{Port: serial.COM1Port, GSI: serial.COM1IRQ}},
		VirtioMMIO: virtioACPI(virtioDevices),
		PanicPort:  pvpanic.Port,
	}
}

func (d *legacyDevices) attachInput(r io.Reader) {
	d.input = d.uart.AttachInput(r)
}

// flush waits until the guest's last console output has been written.
func (d *legacyDevices) flush() {
	if d != nil && d.uart != nil {
		d.uart.Close()
	}
}

func (d *legacyDevices) close() {
	if d.input != nil {
		d.input.Close()
	}
	if d.uart != nil {
		d.uart.Close()
	}
	if d.uartIRQ != nil {
		d.uartIRQ.close()
	}
}

func (d *legacyDevices) state() LegacyState {
	return LegacyState{Serial: d.uart.State(), BootTimer: d.bootTimer.Timer.State()}
}

func (d *legacyDevices) restore(s LegacyState) error {
	if err := d.uart.Restore(s.Serial); err != nil {
		return fmt.Errorf("serial: %w", err)
	}
	if err := d.bootTimer.Timer.Restore(s.BootTimer); err != nil {
		return fmt.Errorf("boot timer: %w", err)
	}
	return nil
}

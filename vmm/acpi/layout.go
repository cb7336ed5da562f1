package acpi

import (
	"encoding/binary"
	"fmt"
)

// Fixed addresses of the interrupt controllers the MADT announces. They are
// where KVM's in-kernel local APICs and I/O APIC live by default, and where
// every PC OS expects them.
const (
	LocalAPICAddr uint32 = 0xFEE0_0000
	IOAPICAddr    uint32 = 0xFEC0_0000
	// IOAPICID is the I/O APIC's ID in the MADT. KVM's in-kernel I/O APIC
	// resets its ID register to 0 and the VMM's is created with this one,
	// so the table and the chip agree. (I/O APIC IDs are a separate
	// namespace from local APIC IDs on x2APIC-era systems.)
	IOAPICID = 0
)

// MaxCPUs is the most vCPUs the tables can describe: a Processor Local APIC
// entry holds an 8-bit APIC ID and 0xFF is the broadcast ID.
const MaxCPUs = 254

// Values the VMM's power device sees on the sleep control port.
const (
	// SleepTypeS5 is the SLP_TYP value the DSDT's \_S5 object declares.
	SleepTypeS5 = 5
	// SleepEnable is the SLP_EN bit of the sleep control register.
	SleepEnable = 1 << 5
	// SleepControlPoweroff is what Linux writes to the sleep control
	// register to power off: (SLP_TYP << 2) | SLP_EN.
	SleepControlPoweroff = SleepTypeS5<<2 | SleepEnable
	// SleepStatusWake is WAK_STS, the bit Linux clears in the sleep status
	// register by writing it.
	SleepStatusWake = 1 << 7
)

// Config says what the tables describe.
type Config struct {
	// CPUs is the number of vCPUs; vCPU i has local APIC ID i.
	CPUs int
	// SleepControlPort and SleepStatusPort are the I/O ports of the
	// hardware-reduced sleep registers (one byte each).
	SleepControlPort, SleepStatusPort uint16
	// ResetPort and ResetValue form the ACPI reset register: Linux reboots
	// by writing ResetValue to ResetPort.
	ResetPort  uint16
	ResetValue uint8
	// CMOSRTC says the VMM emulates a CMOS real-time clock at ports
	// 0x70-0x71. When false the FADT tells the guest there is none, so Linux
	// does not register the rtc_cmos device (it takes the wall-clock time
	// from kvmclock instead).
	CMOSRTC bool
	// LegacyPIC says the machine has the dual 8259 PICs (KVM's in-kernel
	// irqchip includes them; the split irqchip has none). It sets the
	// MADT's PCAT_COMPAT flag.
	LegacyPIC bool

	// Serial and VirtioMMIO are devices to describe in the DSDT, so the
	// guest finds them with their interrupts. This is not optional on a
	// hardware-reduced platform: Linux then has no legacy PIC, numbers
	// its interrupts dynamically, and an interrupt it was told about only
	// by number (the 8250 driver's built-in IRQ 4, a virtio_mmio.device=
	// command-line option) does not reach the I/O APIC pin of that number.
	// Devices listed here reach Linux through acpi_register_gsi instead.
	Serial     []SerialPort
	VirtioMMIO []VirtioMMIODevice
	// PanicPort, when not 0, is the I/O port of a pvpanic device (QEMU's
	// "QEMU0001"): Linux writes to it when it panics, so the VMM can tell a
	// crash from a reboot.
	PanicPort uint16
}

// SerialPort is a 16550-compatible UART (ACPI _HID PNP0501) occupying
// eight I/O ports.
type SerialPort struct {
	Port uint16 // first I/O port, e.g. 0x3F8
	GSI  uint32 // I/O APIC pin it interrupts on, e.g. 4
}

// VirtioMMIODevice is a virtio-mmio transport window (ACPI _HID LNRO0005,
// which Linux's virtio_mmio driver matches).
type VirtioMMIODevice struct {
	Addr uint64 // guest physical address of the register window, below 4 GiB
	Size uint64 // window size in bytes
	GSI  uint32 // I/O APIC pin it interrupts on
}

// Device description limits: the I/O APIC's pin count bounds the GSIs; the
// counts keep the DSDT small and its device names short.
const (
	ioapicPins    = 24 // KVM's in-kernel I/O APIC
	maxSerial     = 4
	maxVirtioMMIO = 64
)

func (c Config) validate() error {
	if c.CPUs < 1 || c.CPUs > MaxCPUs {
		return fmt.Errorf("acpi: %d CPUs, want 1 to %d", c.CPUs, MaxCPUs)
	}
	// Port 0 is the legacy DMA controller: a zero here is a forgotten
	// setting, not a choice.
	if c.SleepControlPort == 0 || c.SleepStatusPort == 0 || c.ResetPort == 0 {
		return fmt.Errorf("acpi: sleep control, sleep status and reset ports must be set (got %#x, %#x, %#x)",
			c.SleepControlPort, c.SleepStatusPort, c.ResetPort)
	}
	if c.SleepControlPort == c.SleepStatusPort {
		return fmt.Errorf("acpi: sleep control and sleep status share port %#x", c.SleepControlPort)
	}
	if len(c.Serial) > maxSerial || len(c.VirtioMMIO) > maxVirtioMMIO {
		return fmt.Errorf("acpi: %d serial ports and %d virtio-mmio devices, at most %d and %d",
			len(c.Serial), len(c.VirtioMMIO), maxSerial, maxVirtioMMIO)
	}
	// Each device gets its own pin: the descriptions say "Exclusive".
	used := map[uint32]string{}
	claim := func(gsi uint32, who string) error {
		if gsi == 0 || gsi >= ioapicPins {
			return fmt.Errorf("acpi: %s: GSI %d, want 1 to %d (0 is the timer's)", who, gsi, ioapicPins-1)
		}
		if other, ok := used[gsi]; ok {
			return fmt.Errorf("acpi: %s and %s share GSI %d", who, other, gsi)
		}
		used[gsi] = who
		return nil
	}
	for i, s := range c.Serial {
		who := fmt.Sprintf("serial port %#x", s.Port)
		if s.Port == 0 || uint32(s.Port)+8 > 0x10000 {
			return fmt.Errorf("acpi: serial port %d at I/O port %#x", i, s.Port)
		}
		if err := claim(s.GSI, who); err != nil {
			return err
		}
	}
	for i, d := range c.VirtioMMIO {
		who := fmt.Sprintf("virtio-mmio device %d at %#x", i, d.Addr)
		if d.Size == 0 || d.Size >= 1<<32 || d.Addr > 1<<32-d.Size {
			return fmt.Errorf("acpi: %s: window of %#x bytes does not fit below 4 GiB", who, d.Size)
		}
		if err := claim(d.GSI, who); err != nil {
			return err
		}
	}
	return nil
}

// Identification written into every table header. Linux ignores it except
// for quirk tables keyed on OEM IDs, which must not match us.
var (
	oemID       = [6]byte{'S', 'M', 'O', 'L', 'V', 'M'}
	oemTableID  = [8]byte{'S', 'M', 'O', 'L', 'V', 'M', ' ', ' '}
	creatorID   = [4]byte{'S', 'M', 'O', 'L'}
	oemRevision = uint32(1)
	creatorRev  = uint32(1)
)

// headerSize is the size of the common ACPI system description table header.
const headerSize = 36

// Offsets inside the common table header.
const (
	hdrLength   = 4
	hdrChecksum = 9
)

var le = binary.LittleEndian

// newTable returns a table of the given total length whose header is filled
// in except for the checksum, which sealTable computes once the body is
// written.
func newTable(signature string, length int, revision uint8) []byte {
	t := make([]byte, length)
	copy(t[0:4], signature)
	le.PutUint32(t[hdrLength:], uint32(length))
	t[8] = revision
	copy(t[10:16], oemID[:])
	copy(t[16:24], oemTableID[:])
	le.PutUint32(t[24:], oemRevision)
	copy(t[28:32], creatorID[:])
	le.PutUint32(t[32:], creatorRev)
	return t
}

// sealTable sets a table's checksum byte so that all its bytes sum to zero
// modulo 256, which is how ACPI tables prove they are intact.
func sealTable(t []byte) {
	t[hdrChecksum] = 0
	t[hdrChecksum] = checksum(t)
}

// checksum returns the byte that makes b sum to zero modulo 256.
func checksum(b []byte) uint8 {
	var sum uint8
	for _, x := range b {
		sum += x
	}
	return -sum
}

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
}

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

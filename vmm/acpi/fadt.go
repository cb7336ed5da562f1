package acpi

// FADT (Fixed ACPI Description Table), revision 6 (ACPI 6.3), 276 bytes.
// Only the fields a hardware-reduced platform uses are set; every legacy
// fixed-hardware block (PM1, PM2, PM timer, GPE, SMI command) stays zero,
// which is what "not present" means.
const (
	fadtSize         = 276
	fadtRevision     = 6
	fadtMinorVersion = 3 // ACPI 6.3: the MADT's "online capable" bit is defined

	fadtIAPCBootArch   = 109 // 2 bytes
	fadtFlags          = 112 // 4 bytes
	fadtResetReg       = 116 // Generic Address Structure
	fadtResetValue     = 128
	fadtMinorVersionAt = 131
	fadtXDSDT          = 140 // 8 bytes
	fadtSleepControl   = 244 // Generic Address Structure
	fadtSleepStatus    = 256 // Generic Address Structure
	fadtHypervisorID   = 268 // 8 bytes
)

// IA-PC boot architecture flags (FADT offset 109).
const (
	// bootArchLegacyDevices: there are user-visible ISA-style devices; the
	// 16550 serial port at 0x3F8 is one.
	bootArchLegacyDevices = 1 << 0
	// bootArch8042 is deliberately never set: there is no PS/2 keyboard
	// controller, so Linux's i8042 driver must not probe for one. (Reboot
	// through port 0x64 does not consult this flag.)
	bootArch8042 = 1 << 1
	// bootArchNoVGA: there is no VGA. Safe because smol never emulates
	// VGA; virtio-gpu is not VGA-compatible. Linux then does not probe the
	// legacy VGA ranges.
	bootArchNoVGA = 1 << 2
	// bootArchNoCMOSRTC: there is no CMOS RTC at ports 0x70-0x71. Safe
	// only when the VMM emulates none (Config.CMOSRTC false): Linux then
	// skips the rtc_cmos device and reads the time from kvmclock. Claiming
	// an RTC that does not exist would make rtc_cmos read garbage.
	bootArchNoCMOSRTC = 1 << 5
)

// FADT feature flags (offset 112).
const (
	// Power and sleep buttons are not fixed-feature hardware (there is no
	// PM1 block to hold them).
	fadtFlagPowerButton = 1 << 4
	fadtFlagSleepButton = 1 << 5
	// The reset register is valid.
	fadtFlagResetRegSup = 1 << 10
	// Hardware-reduced ACPI: no SCI, no PM1/GPE blocks, no legacy PIC or
	// PIT dependence; sleep goes through the sleep control register.
	fadtFlagHWReducedACPI = 1 << 20
)

// Generic Address Structure: how ACPI names a register.
const (
	gasSize         = 12
	gasSystemIO     = 1 // address space ID: I/O ports
	gasAccessByte   = 1 // access size: 8 bits
	gasRegisterBits = 8
)

// putGAS writes a one-byte I/O port register description at b[0:12].
func putGAS(b []byte, port uint16) {
	b[0] = gasSystemIO
	b[1] = gasRegisterBits // register bit width
	b[2] = 0               // register bit offset
	b[3] = gasAccessByte
	le.PutUint64(b[4:], uint64(port))
}

func buildFADT(cfg Config, dsdtAddr uint64) []byte {
	t := newTable("FACP", fadtSize, fadtRevision)

	bootArch := uint16(bootArchLegacyDevices | bootArchNoVGA)
	if !cfg.CMOSRTC {
		bootArch |= bootArchNoCMOSRTC
	}
	le.PutUint16(t[fadtIAPCBootArch:], bootArch)

	le.PutUint32(t[fadtFlags:], fadtFlagPowerButton|fadtFlagSleepButton|fadtFlagResetRegSup|fadtFlagHWReducedACPI)

	putGAS(t[fadtResetReg:fadtResetReg+gasSize], cfg.ResetPort)
	t[fadtResetValue] = cfg.ResetValue
	t[fadtMinorVersionAt] = fadtMinorVersion

	// Only the 64-bit DSDT pointer is set; the 32-bit one (offset 40) stays
	// zero so the two can never disagree.
	le.PutUint64(t[fadtXDSDT:], dsdtAddr)

	putGAS(t[fadtSleepControl:fadtSleepControl+gasSize], cfg.SleepControlPort)
	putGAS(t[fadtSleepStatus:fadtSleepStatus+gasSize], cfg.SleepStatusPort)

	copy(t[fadtHypervisorID:fadtHypervisorID+8], "SMOLVM")
	sealTable(t)
	return t
}

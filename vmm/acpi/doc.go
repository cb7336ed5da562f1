// Package acpi builds the minimal set of ACPI tables a Linux guest needs when
// there is no firmware: enough to find its CPUs and interrupt controllers, to
// power off and to reboot.
//
// A PC's firmware normally hands the OS these tables. smol boots the kernel
// directly, so the VMM writes them itself into guest memory:
//
//	RSDP ─► XSDT ─┬─► FADT ─► DSDT   (power: sleep and reset registers, \_S5;
//	              │                   the serial and virtio-mmio devices)
//	              └─► MADT           (CPUs: one local APIC each; one I/O APIC)
//
// The FADT declares a "hardware-reduced" ACPI platform: no PM timer, no GPE
// blocks, no SCI, no legacy PM1 registers. Instead of those the guest gets
// three I/O ports, which the VMM's power device decodes:
//
//   - the sleep control register: to power off, Linux writes
//     (SLP_TYP << 2) | SLP_EN, i.e. SleepControlPoweroff (0x34), because the
//     DSDT's \_S5 object says the S5 ("soft off") sleep type is 5;
//   - the sleep status register: Linux writes WAK_STS (0x80) there to clear
//     it before sleeping and may read it back; it can read as zero;
//   - the reset register: to reboot, Linux writes Config.ResetValue to it.
//
// A hardware-reduced guest has no legacy PIC, so Linux assigns interrupt
// numbers dynamically and only devices described in the DSDT (with their
// I/O APIC pin in _CRS) get working interrupts: the VMM must list its serial
// ports and virtio-mmio windows in Config rather than on the kernel command
// line (virtio_mmio.device=...). See Config.Serial.
//
// Everything is built in a byte slice laid out for a given guest physical
// address; the caller copies it into guest memory. No table contains data
// from the guest, so nothing here parses untrusted input.
package acpi

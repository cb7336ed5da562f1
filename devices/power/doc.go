// Package power emulates the ACPI registers a guest uses to power off and
// reboot: the sleep control, sleep status and reset registers of an ACPI
// "hardware-reduced" platform, as three I/O ports.
//
// A hardware-reduced platform has none of the PC's legacy power management
// blocks (PM1a, GPE); instead the FADT points at a sleep control register,
// a sleep status register and a reset register (the VMM passes this
// package's port constants to its ACPI table builder). Linux then:
//
//   - powers off by looking up SLP_TYP in the DSDT's \_S5 object, writing
//     WAK_STS (bit 7) to the sleep status register to clear it, and writing
//     SLP_TYP<<2 | SLP_EN to the sleep control register; it then spins
//     reading the sleep status register until WAK_STS is set, which never
//     happens here: the VMM stops the vCPUs instead;
//   - reboots by writing the FADT's reset value to the reset register.
//
// Only S5 (soft off) is implemented. Requests for other sleep states
// (S1-S4: standby, suspend to RAM, hibernate) are ignored, since a VM that
// suspends needs a wake-up path smol does not have; the DSDT declares only
// \_S5, so Linux does not offer the others.
package power

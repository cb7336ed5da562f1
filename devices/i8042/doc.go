// Package i8042 emulates the one part of the PC's PS/2 keyboard controller
// that a VM needs: its reset line, which Linux pulses to reboot.
//
// On a PC the 8042 controller has a data port (0x60) and a status/command
// port (0x64). Writing command 0xFE to port 0x64 pulses the CPU's reset
// line; it is one of the ways Linux reboots (reboot=k, and its fallback when
// ACPI reset did not take). Before each command Linux waits for the
// controller's input buffer to be empty, so the status port must read with
// bit 1 clear.
//
// There is no keyboard or mouse behind this controller. The status port
// always reads 0 (no output waiting, input buffer empty), the data port reads
// 0, and every other command or data byte is accepted and ignored. A guest
// kernel built with the i8042 input driver would therefore see its
// controller self-test (command 0xAA) go unanswered and give up after its
// timeout (about half a second); smol's guest kernel leaves that driver out
// or disables it (i8042.noprobe).
package i8042

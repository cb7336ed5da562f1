// Package devices defines the contract between the VMM's I/O buses and the
// emulated non-virtio devices that live in its sub-packages.
//
// A guest talks to a legacy PC device by reading and writing its registers,
// either in the x86 port I/O space (IN/OUT instructions) or in a window of
// guest-physical memory (MMIO). Under KVM every such access leaves the guest
// as a vCPU exit; the VMM looks up which device owns the address on its bus
// and calls that device's Read or Write. A device answers by changing its own
// state and, when it wants the guest's attention, by raising its interrupt.
//
// The sub-packages each emulate one device:
//
//	serial     a 16550A UART: the guest's console (ttyS0)
//	i8042      the reset line of the PS/2 keyboard controller (reboot)
//	power      ACPI hardware-reduced sleep and reset registers (poweroff, reboot)
//	boottimer  a port the guest's init writes to when userspace is reached
//
// Every device keeps all of its guest-visible state in a plain exported State
// struct, with State and Restore methods, so that snapshots and forks can save
// and recreate it.
package devices

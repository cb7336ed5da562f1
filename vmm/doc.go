// Package vmm runs one virtual machine: it creates the KVM VM, gives it guest
// memory, loads the kernel, wires the devices onto the port-I/O and MMIO
// buses, runs one goroutine per vCPU and turns vCPU exits into device calls,
// and stops cleanly when the guest powers off, reboots or crashes.
//
// The life of a Machine:
//
//	New      create VM, memory, interrupt controllers, devices, vCPUs; load the kernel
//	Start    one goroutine per vCPU, each locked to its OS thread, enters KVM_RUN
//	Wait     blocks until the guest stops (poweroff, reboot, crash) or Stop
//	Close    releases KVM, memory and device resources
//
// Interrupts: the local APICs are always KVM's. By default (IRQChipSplit,
// irqchip.go) the I/O APIC is emulated here and every device interrupt is
// an irqfd whose GSI KVM routes as the MSI the guest programmed for that
// pin; IRQChipKernel keeps the PICs, I/O APIC and PIT in KVM instead.
//
// Locking: the buses are immutable once the machine starts, so vCPU threads
// dispatch without a lock; each device locks its own state. The only state
// shared between vCPU goroutines and the rest is the stop reason, set once
// under Machine.mu.
package vmm

package devices

// Device is a range of port I/O or MMIO registers.
//
// offset is relative to the start of the range the device was registered
// at, and len(data) is 1, 2, 4 or 8. Read fills all of data; Write consumes
// it. Both are called from vCPU threads, possibly from several vCPUs at once,
// so a device protects its own state with a lock. The values come straight
// from the guest: a device checks them and never panics on any offset, width
// or content.
type Device interface {
	Read(offset uint64, data []byte)
	Write(offset uint64, data []byte)
}

// Interrupt raises a device's interrupt line.
//
// The VMM implements it with a KVM irqfd: each Trigger writes an eventfd, and
// KVM turns that into one edge on an I/O APIC pin, as an ISA device's
// edge-triggered IRQ line would produce. Trigger is safe to call from any
// goroutine and does not block; a device may call it while holding its own
// lock, so an implementation must never call back into the device.
type Interrupt interface {
	Trigger() error
}

// Package virtio implements the device side of virtio 1.2 for smol: split
// virtqueues that walk guest-written descriptor chains defensively, and the
// virtio-mmio (version 2) transport that connects a Device to the guest.
//
// Everything read from guest memory is hostile. The queue code copies every
// descriptor field it validates before using it, bounds-checks every address
// and length against guest RAM, and turns malformed input into errors that
// wrap ErrMalformed rather than panics.
//
// Ownership: a Queue belongs to exactly one device goroutine. The MMIO
// transport is shared by vCPU threads, ioeventfd pollers and device
// goroutines, and documents its locking on the MMIO type.
package virtio

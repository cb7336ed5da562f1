package virtio

import "errors"

var (
	// ErrMalformed reports a descriptor chain (or ring state) that breaks
	// the virtio rules: a loop, an index or address out of range, a bad
	// length, indirect-table misuse, or a writable buffer before a readable
	// one. Pop consumes the offending head, so a device skips it and goes on.
	ErrMalformed = errors.New("virtio: malformed descriptor chain")

	// ErrQueueBroken reports a queue whose avail ring is unusable as a
	// whole (its index ran more than the queue size ahead of the device).
	// Pop returns it once, wrapped together with ErrMalformed, and then
	// treats the queue as empty until the driver resets the device.
	ErrQueueBroken = errors.New("virtio: queue broken by the driver")

	// ErrInvalidQueue reports queue geometry the driver configured that the
	// device cannot use: a size that is zero, not a power of two or above
	// the maximum, misaligned ring addresses, or rings outside guest RAM.
	ErrInvalidQueue = errors.New("virtio: invalid queue configuration")
)

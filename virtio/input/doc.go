// Package input is the virtio input device (virtio 1.2, section 5.8): a
// keyboard or a tablet (an absolute pointer with buttons and a wheel) that
// the host types and points with, for a guest display (devices/gpu). The
// guest reads it as an ordinary evdev device (/dev/input/eventN).
//
// The device describes itself through its configuration space, which the
// driver queries by writing a selector (name, IDs, the event types and
// codes it emits, the ranges of its axes) and reading the answer; the
// host's events reach the guest through buffers the driver posts on the
// event queue, 8 bytes each (type, code, value), a batch ending in
// SYN_REPORT. Events the host sends while the guest has posted no buffers
// wait in a bounded backlog; beyond it a batch is refused, never half
// delivered, so the guest never sees a key pressed and not released by
// the host's intent.
package input

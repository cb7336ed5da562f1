// Package boottimer records when a guest's userspace starts: the guest's
// init writes one byte to an I/O port, and the device notes the host time of
// that exit.
//
// It measures boot time from the outside, without trusting the guest's
// clock: the VMM subtracts the time it started the VM from the time this
// device recorded. The magic value 123 follows Firecracker's convention for
// its boot-timer device; the port is smol's own choice. Only the first
// magic write counts: later ones, and any other value, are ignored, so a
// guest cannot move the mark.
package boottimer

package virtio

// Every device does its work on a goroutine of its own, off the vCPU
// threads: a vCPU's notification (an ioeventfd, or an MMIO write) only wakes
// the device's worker (Wakeup), and the worker's whole life is run by
// Lifecycle.

// Wakeup is a coalescing notification: any number of Signals before the
// receiver looks count as one, and Signal never blocks, so a vCPU thread
// can always deliver it.
type Wakeup struct{ c chan struct{} }

// NewWakeup returns a Wakeup with nothing pending.
func NewWakeup() Wakeup { return Wakeup{c: make(chan struct{}, 1)} }

// Signal marks the wake-up pending.
func (w Wakeup) Signal() {
	select {
	case w.c <- struct{}{}:
	default: // already pending: this one is covered
	}
}

// C receives once per pending wake-up.
func (w Wakeup) C() <-chan struct{} { return w.c }

// Clear drops a pending wake-up: after a reset, nothing the driver did
// before it is due.
func (w Wakeup) Clear() {
	select {
	case <-w.c:
	default:
	}
}

package virtio

import "sync"

// Every device does its work on goroutines of its own, off the vCPU
// threads: a vCPU's notification (an ioeventfd, or an MMIO write) only wakes
// the device's worker, and resetting the device stops the worker and waits
// for the request in progress. Wakeup and Task are those two mechanisms,
// shared by all devices.

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

// Task is a set of goroutines that run until stopped.
type Task struct {
	stop chan struct{}
	done chan struct{} // closed when every goroutine has returned
}

// Go starts each fn on its own goroutine with the Task's stop channel,
// which closes when Stop is called; fns return when they see it.
func Go(fns ...func(stop <-chan struct{})) *Task {
	t := &Task{stop: make(chan struct{}), done: make(chan struct{})}
	var running sync.WaitGroup
	running.Add(len(fns))
	for _, fn := range fns {
		go func() {
			defer running.Done()
			fn(t.stop)
		}()
	}
	go func() {
		running.Wait()
		close(t.done)
	}()
	return t
}

// Stop closes the stop channel and waits for every goroutine to return.
func (t *Task) Stop() {
	close(t.stop)
	<-t.done
}

// Done is closed once every goroutine has returned.
func (t *Task) Done() <-chan struct{} { return t.done }

// Stopped reports, without blocking, whether stop has been closed: workers
// check it between requests so that a reset waits for one request at most.
func Stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

package virtio

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Lifecycle is the one mechanism every smol device uses to run its queue
// work: Activate starts the device's worker goroutine when the driver sets
// DRIVER_OK, Notify wakes it, Pause parks it at a point between requests
// with every queue position stable, Resume lets it go on exactly where it
// stopped, and Reset stops it and waits for it.
//
// A device embeds one, calls Activate from its own Activate with the
// function that runs its worker, and gets Notify, Reset, Pause and Resume
// as they are. The worker function receives a *Worker: its stop and pause
// signals, one wake-up per queue, and the negotiated Env.
//
// Parking keeps the worker's goroutine and everything it holds (a receive
// chain popped for a frame not yet arrived, a connection table), which a
// stop and restart would lose. That is what makes a pause exact and what
// lets a snapshot read queue positions without racing a worker.
type Lifecycle struct {
	name  string
	wakes []Wakeup // one per queue; they live as long as the device

	mu  sync.Mutex // serialises Activate, Reset, Pause and Resume
	cur *Worker    // nil while inactive
}

// NewLifecycle returns the lifecycle of a device called name (for errors)
// with the given number of queues.
func NewLifecycle(name string, queues int) *Lifecycle {
	l := &Lifecycle{name: name, wakes: make([]Wakeup, queues)}
	for i := range l.wakes {
		l.wakes[i] = NewWakeup()
	}
	return l
}

// ErrAlreadyActive reports an Activate of a device whose worker runs.
var ErrAlreadyActive = errors.New("already active")

// Activate starts run on a goroutine of its own with a Worker for env.
// Every queue gets one wake-up at once: the driver may have made buffers
// available before DRIVER_OK (their notifications were dropped), or a
// restored snapshot may have requests pending.
func (l *Lifecycle) Activate(env Env, run func(*Worker)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil {
		return fmt.Errorf("%s: activate: %w", l.name, ErrAlreadyActive)
	}
	w := &Worker{
		Env:     env,
		wakes:   l.wakes,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		pausing: make(chan struct{}),
		resumed: make(chan struct{}),
		parked:  make(chan struct{}, 1),
	}
	l.cur = w
	go func() {
		defer close(w.done)
		run(w)
	}()
	for _, wake := range l.wakes {
		wake.Signal()
	}
	return nil
}

// Active tells whether the worker runs (or is parked).
func (l *Lifecycle) Active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur != nil
}

// closedChan is what Stopped returns for an inactive device.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Stopped returns a channel closed when the current activation is reset
// (already closed if the device is inactive): host-side callers waiting
// for the worker watch it so that a reset cannot leave them waiting.
func (l *Lifecycle) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return closedChan
	}
	return l.cur.stop
}

// Notify wakes the worker for queue. It never blocks: one pending wake-up
// covers any number of notifications, since workers drain what is there.
func (l *Lifecycle) Notify(queue int) {
	if queue >= 0 && queue < len(l.wakes) {
		l.wakes[queue].Signal()
	}
}

// Reset stops the worker (a parked one too) and waits for it to return.
// Pending wake-ups are dropped: they were for queues that no longer exist.
func (l *Lifecycle) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.cur
	if w == nil {
		return
	}
	l.cur = nil
	close(w.stop)
	<-w.done
	for _, wake := range l.wakes {
		wake.Clear()
	}
}

// Pause asks the worker to park and waits until it has, or has returned.
// A parked worker touches neither its queues nor guest memory and raises
// no interrupt. Pausing an inactive or paused device does nothing.
func (l *Lifecycle) Pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.cur
	if w == nil || w.paused {
		return
	}
	w.paused = true
	w.pmu.Lock()
	w.pauseRequested.Store(true)
	close(w.pausing)
	w.pmu.Unlock()
	select {
	case <-w.parked:
	case <-w.done:
	}
}

// Resume lets a parked worker continue, and wakes it for every queue: a
// pause can cut a drain short (Interrupted) with requests still available
// whose notification the worker had already taken, and the driver will
// not notify for them again. Wake-ups that arrived meanwhile are pending
// anyway.
func (l *Lifecycle) Resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.cur
	if w == nil || !w.paused {
		return
	}
	w.paused = false
	w.pmu.Lock()
	resumed := w.resumed
	w.pausing, w.resumed = make(chan struct{}), make(chan struct{})
	w.pauseRequested.Store(false)
	w.pmu.Unlock()
	close(resumed)
	for _, wake := range l.wakes {
		wake.Signal()
	}
}

// Worker is one activation of a device, as its worker goroutine sees it.
type Worker struct {
	Env // negotiated features, queues, guest memory, interrupter

	wakes []Wakeup
	stop  chan struct{} // closed by Reset
	done  chan struct{} // closed when the worker function returned

	paused bool // Lifecycle.mu

	pmu     sync.Mutex    // guards the two channels below, replaced on Resume
	pausing chan struct{} // closed while a pause is requested
	resumed chan struct{} // closed by the Resume that ends this pause
	parked  chan struct{} // the worker's acknowledgement of a pause
	// pauseRequested mirrors pausing being closed, for Interrupted, which
	// workers call once per request: an atomic load, not a lock.
	pauseRequested atomic.Bool
}

// Stop is closed when the device is reset: the worker must return.
func (w *Worker) Stop() <-chan struct{} { return w.stop }

// Wake receives once per pending notification of queue (coalesced).
func (w *Worker) Wake(queue int) <-chan struct{} { return w.wakes[queue].C() }

// Pausing is closed when a pause is requested: the worker then calls Park
// from a point where it is between requests. Call it afresh each time
// round a loop; after a Resume it is a new channel.
func (w *Worker) Pausing() <-chan struct{} {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return w.pausing
}

// Park acknowledges a pause and blocks until Resume. It returns false if
// the device was reset instead: the worker must return.
func (w *Worker) Park() bool {
	w.pmu.Lock()
	resumed := w.resumed
	w.pmu.Unlock()
	select {
	case w.parked <- struct{}{}:
	default: // already acknowledged this pause
	}
	select {
	case <-resumed:
		return true
	case <-w.stop:
		return false
	}
}

// Interrupted tells, without blocking, whether the worker should leave
// what it is doing and go back to its wait, where it stops or parks:
// workers check it between requests, so a reset or a pause waits for one
// request at most.
func (w *Worker) Interrupted() bool {
	if w.pauseRequested.Load() {
		return true
	}
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// Wait blocks until queue has a notification (true) or the device is
// reset (false), parking meanwhile whenever a pause is requested. It is
// the whole wait of a worker that serves one queue.
func (w *Worker) Wait(queue int) bool {
	return w.Next(w.Wake(queue), nil, nil) == 0
}

// Next is Wait for a worker with several sources of work (queues' Wake
// channels, or its own): it blocks until one of a, b and c receives and
// returns its position (0, 1 or 2), or returns -1 when the device is
// reset, parking meanwhile whenever a pause is requested. Pass nil for a
// source not used.
func (w *Worker) Next(a, b, c <-chan struct{}) int {
	for {
		select {
		case <-w.stop:
			return -1
		case <-w.Pausing():
			if !w.Park() {
				return -1
			}
		case <-a:
			return 0
		case <-b:
			return 1
		case <-c:
			return 2
		}
	}
}

// Signal raises queue's used-buffer interrupt if the driver wants one for
// what was pushed since the last time it was asked (event index or the
// NO_INTERRUPT flag).
func (w *Worker) Signal(queue int) error {
	return w.Queues[queue].Signal(w.Interrupt, queue)
}

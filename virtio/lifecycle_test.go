package virtio

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// countingWorker serves queue 0 by counting wake-ups. With busy set, its
// first request signals busy and holds the worker until release is closed,
// so a test can pause mid-request.
type countingWorker struct {
	served  atomic.Int64
	busy    chan struct{}
	release chan struct{}
	exited  atomic.Bool
}

func (c *countingWorker) run(w *Worker) {
	defer c.exited.Store(true)
	for w.Wait(0) {
		if w.Interrupted() {
			continue // back to Wait, which parks or returns
		}
		if c.busy != nil && c.served.Load() == 0 {
			c.busy <- struct{}{}
			<-c.release
		}
		c.served.Add(1)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLifecycleActivateNotifyReset(t *testing.T) {
	l := NewLifecycle("test", 1)
	c := &countingWorker{}
	if err := l.Activate(Env{}, c.run); err != nil {
		t.Fatal(err)
	}
	// Activation wakes the worker once by itself.
	waitFor(t, "the activation's wake-up", func() bool { return c.served.Load() == 1 })
	if err := l.Activate(Env{}, c.run); !errors.Is(err, ErrAlreadyActive) {
		t.Fatalf("second Activate: %v", err)
	}
	l.Notify(0)
	waitFor(t, "a notification", func() bool { return c.served.Load() == 2 })
	l.Notify(7) // no such queue: ignored
	stopped := l.Stopped()
	l.Reset()
	if !c.exited.Load() {
		t.Fatal("Reset returned before the worker did")
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Stopped not closed by Reset")
	}
	if l.Active() {
		t.Fatal("active after Reset")
	}
	l.Reset() // idempotent
}

func TestLifecyclePauseParksBetweenRequests(t *testing.T) {
	l := NewLifecycle("test", 1)
	c := &countingWorker{busy: make(chan struct{}), release: make(chan struct{})}
	if err := l.Activate(Env{}, c.run); err != nil {
		t.Fatal(err)
	}
	<-c.busy // the worker is in the middle of a request
	paused := make(chan struct{})
	go func() {
		l.Pause()
		close(paused)
	}()
	select {
	case <-paused:
		t.Fatal("Pause returned while a request was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	close(c.release)
	<-paused
	if got := c.served.Load(); got != 1 {
		t.Fatalf("served %d before parking, want 1", got)
	}
	l.Notify(0)
	time.Sleep(50 * time.Millisecond)
	if got := c.served.Load(); got != 1 {
		t.Fatalf("a paused worker served a notification (%d)", got)
	}
	l.Pause() // pausing a paused device does nothing
	l.Resume()
	// At least 2: Resume wakes every queue itself too, so the worker may
	// serve the held notification and then Resume's own wake-up as well.
	waitFor(t, "the notification held over the pause", func() bool { return c.served.Load() >= 2 })
	// Pause and resume again, then reset while paused.
	l.Pause()
	l.Reset()
	if !c.exited.Load() {
		t.Fatal("Reset of a paused device returned before its worker did")
	}
	l.Resume() // inactive: nothing to do
}

func TestLifecyclePauseOfAnExitedWorker(t *testing.T) {
	l := NewLifecycle("test", 1)
	if err := l.Activate(Env{}, func(*Worker) {}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		l.Pause() // the worker is gone: must not wait for a park
		l.Resume()
		l.Reset()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Pause waited for a worker that had returned")
	}
}

// TestResumeFinishesADrainThePauseCut: a worker paused in the middle of
// draining its queue goes on with what is left after Resume, with no new
// notification (the driver sends none for requests it already announced).
func TestResumeFinishesADrainThePauseCut(t *testing.T) {
	l := NewLifecycle("test", 1)
	var pending atomic.Int64
	pending.Store(1000)
	inDrain := make(chan struct{}, 1)
	gate := make(chan struct{})
	run := func(w *Worker) {
		for w.Wait(0) {
			for !w.Interrupted() && pending.Load() > 0 {
				if pending.Add(-1) == 500 {
					inDrain <- struct{}{}
					<-gate // the pause is requested meanwhile
				}
			}
		}
	}
	if err := l.Activate(Env{}, run); err != nil {
		t.Fatal(err)
	}
	<-inDrain
	paused := make(chan struct{})
	go func() { l.Pause(); close(paused) }()
	for !func() bool { // wait until the pause is requested
		select {
		case <-l.cur.Pausing():
			return true
		default:
			return false
		}
	}() {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	<-paused
	if left := pending.Load(); left == 0 {
		t.Fatal("the pause did not cut the drain short: nothing to test")
	}
	l.Resume()
	waitFor(t, "the rest of the drain after Resume", func() bool { return pending.Load() == 0 })
	l.Reset()
}

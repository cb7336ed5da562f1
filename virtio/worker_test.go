package virtio

import (
	"testing"
	"time"
)

func TestWakeupCoalescesAndClears(t *testing.T) {
	w := NewWakeup()
	w.Signal()
	w.Signal() // covered by the first; must not block
	<-w.C()
	select {
	case <-w.C():
		t.Fatal("two signals before a look woke twice")
	default:
	}
	w.Signal()
	w.Clear()
	select {
	case <-w.C():
		t.Fatal("a cleared wake-up was still pending")
	default:
	}
}

func TestTaskStopWaitsForEveryGoroutine(t *testing.T) {
	finished := make(chan int, 2)
	worker := func(id int) func(<-chan struct{}) {
		return func(stop <-chan struct{}) {
			<-stop
			time.Sleep(10 * time.Millisecond) // the request in progress
			finished <- id
		}
	}
	task := Go(worker(1), worker(2))
	select {
	case <-task.Done():
		t.Fatal("Done before Stop")
	default:
	}
	task.Stop()
	if len(finished) != 2 {
		t.Fatalf("Stop returned with %d of 2 goroutines finished", len(finished))
	}
	<-task.Done()
	if !Stopped(task.stop) {
		t.Fatal("Stopped is false after Stop")
	}
}

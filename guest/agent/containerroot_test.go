package main

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestOnceEachKeysSideBySide: a slow preparation of one root does not hold
// up another root's; a second call for the slow root waits for it and
// does not run again; a failed call is tried again.
func TestOnceEachKeysSideBySide(t *testing.T) {
	var o onceEach
	release := make(chan struct{})
	var slowRuns atomic.Int32
	slowDone := make(chan error, 2)
	slow := func() error { slowRuns.Add(1); <-release; return nil }
	go func() { slowDone <- o.Do("a", slow) }()
	for slowRuns.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { slowDone <- o.Do("a", slow) }() // waits for the first

	other := make(chan error, 1)
	go func() { other <- o.Do("b", func() error { return nil }) }()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("key b waited for key a's call in progress")
	}
	select {
	case <-slowDone:
		t.Fatal("a second call for key a returned before the first ended")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	for range 2 {
		if err := <-slowDone; err != nil {
			t.Fatal(err)
		}
	}
	if n := slowRuns.Load(); n != 1 {
		t.Errorf("key a's function ran %d times, want 1", n)
	}

	failing := errors.New("no root")
	if err := o.Do("c", func() error { return failing }); !errors.Is(err, failing) {
		t.Fatalf("a failing call returned %v", err)
	}
	ran := false
	if err := o.Do("c", func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("after a failure, the next call for the key: ran %v, err %v; want it run", ran, err)
	}
}

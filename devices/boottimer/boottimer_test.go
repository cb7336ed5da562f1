package boottimer

import (
	"sync"
	"testing"
	"time"

	"github.com/smolvm/smol/devices"
)

var _ devices.Device = (*Timer)(nil)

// fakeClock hands out increasing times so that a test can tell which write
// was recorded.
type fakeClock struct{ next time.Time }

func (c *fakeClock) now() time.Time {
	t := c.next
	c.next = c.next.Add(time.Second)
	return t
}

func TestFirstMagicWriteIsRecorded(t *testing.T) {
	clock := &fakeClock{next: time.Unix(1000, 0)}
	var reported []time.Time
	timer := New(func(at time.Time) { reported = append(reported, at) })
	timer.now = clock.now

	if _, ok := timer.Reached(); ok {
		t.Fatal("Reached before any write")
	}
	timer.Write(0, []byte{Magic - 1}) // not the magic value
	timer.Write(0, []byte{Magic, 0})  // wrong width
	timer.Write(1, []byte{Magic})     // not our port
	timer.Write(0, []byte{Magic})     // the real one
	timer.Write(0, []byte{Magic})     // a second one is ignored
	if len(reported) != 1 {
		t.Fatalf("onBoot called %d times, want 1", len(reported))
	}
	at, ok := timer.Reached()
	if !ok || !at.Equal(reported[0]) {
		t.Fatalf("Reached() = %v, %v; want %v, true", at, ok, reported[0])
	}
	if !at.Equal(time.Unix(1000, 0)) {
		t.Fatalf("recorded %v: the second magic write moved the mark", at)
	}
}

func TestStateRoundTrip(t *testing.T) {
	timer := New(nil)
	timer.Write(0, []byte{Magic})
	saved := timer.State()

	calls := 0
	restored := New(func(time.Time) { calls++ })
	if err := restored.Restore(saved); err != nil {
		t.Fatal(err)
	}
	if got := restored.State(); got != saved {
		t.Fatalf("restored %+v, want %+v", got, saved)
	}
	restored.Write(0, []byte{Magic})
	if calls != 0 {
		t.Fatal("a restored timer reported boot again")
	}
}

func TestConcurrentWritesRecordOnce(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	timer := New(func(time.Time) { mu.Lock(); calls++; mu.Unlock() })
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timer.Write(0, []byte{Magic})
		}()
	}
	wg.Wait()
	if calls != 1 {
		t.Fatalf("onBoot called %d times from 8 racing vCPUs, want 1", calls)
	}
	b := []byte{0xff}
	timer.Read(0, b)
	if b[0] != 0 {
		t.Fatalf("port reads %#x, want 0", b[0])
	}
}

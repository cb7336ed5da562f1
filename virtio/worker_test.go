package virtio

import (
	"testing"
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

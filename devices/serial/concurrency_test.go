package serial

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentAccess has several "vCPUs" write the console at once while
// the host types and the guest reads, for the race detector. Each writer
// waits for THRE like Linux's console does; with fewer writers than a FIFO
// load, nothing may be dropped.
func TestConcurrentAccess(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	h.out(regIntEnable, ierReceivedData|ierLineStatus|ierTHREmpty)

	const writers, perWriter = 8, 2000
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(c byte) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				for h.in(regLineStatus)&lsrTHREmpty == 0 {
				}
				h.out(regData, c)
			}
		}(byte('a' + w))
	}
	wg.Add(2)
	go func() { // host input
		defer wg.Done()
		for i := 0; i < 1000; i++ {
			h.uart.Enqueue([]byte("k"))
		}
	}()
	go func() { // guest interrupt handler
		defer wg.Done()
		for i := 0; i < 1000; i++ {
			h.in(regIntIdent)
			for h.in(regLineStatus)&lsrDataReady != 0 {
				h.in(regData)
			}
		}
	}()
	wg.Wait()
	h.uart.Close()

	out := h.output.String()
	for w := 0; w < writers; w++ {
		if n := strings.Count(out, string(rune('a'+w))); n != perWriter {
			t.Errorf("writer %c: %d bytes arrived, want %d", 'a'+w, n, perWriter)
		}
	}
	if d := h.uart.State().OutputDropped; d != 0 {
		t.Fatalf("%d bytes dropped", d)
	}
}

package virtiotest

import (
	"sync"
	"sync/atomic"
	"time"
)

// IRQ is a devices.Interrupt that counts triggers, for transport tests.
type IRQ struct {
	count atomic.Int64
	fired chan struct{}
}

// NewIRQ returns an IRQ that has not fired.
func NewIRQ() *IRQ { return &IRQ{fired: make(chan struct{}, 1)} }

// Trigger implements devices.Interrupt.
func (i *IRQ) Trigger() error {
	i.count.Add(1)
	select {
	case i.fired <- struct{}{}:
	default:
	}
	return nil
}

// Count returns how many times the interrupt fired.
func (i *IRQ) Count() int64 { return i.count.Load() }

// Wait waits up to timeout for a trigger not yet waited for.
func (i *IRQ) Wait(timeout time.Duration) bool {
	select {
	case <-i.fired:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Interrupter is a virtio.Interrupter that records signals, for device
// tests that drive queues without a transport.
type Interrupter struct {
	mu      sync.Mutex
	used    map[int]int
	configs int
	fired   chan struct{}
}

// NewInterrupter returns an Interrupter with no signals recorded.
func NewInterrupter() *Interrupter {
	return &Interrupter{used: map[int]int{}, fired: make(chan struct{}, 1)}
}

// SignalUsed implements virtio.Interrupter.
func (i *Interrupter) SignalUsed(queue int) error {
	i.mu.Lock()
	i.used[queue]++
	i.mu.Unlock()
	i.poke()
	return nil
}

// SignalConfigChange implements virtio.Interrupter.
func (i *Interrupter) SignalConfigChange() error {
	i.mu.Lock()
	i.configs++
	i.mu.Unlock()
	i.poke()
	return nil
}

func (i *Interrupter) poke() {
	select {
	case i.fired <- struct{}{}:
	default:
	}
}

// Used returns how many used-buffer signals queue received.
func (i *Interrupter) Used(queue int) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.used[queue]
}

// ConfigChanges returns how many configuration-change signals arrived.
func (i *Interrupter) ConfigChanges() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.configs
}

// Wait waits up to timeout for a signal not yet waited for.
func (i *Interrupter) Wait(timeout time.Duration) bool {
	select {
	case <-i.fired:
		return true
	case <-time.After(timeout):
		return false
	}
}

package net

import (
	"context"
	"errors"
	"sync"
	"time"
)

// fakeBackend is an in-memory Backend: frames queued with deliver go to the
// guest, frames the guest sends are recorded.
type fakeBackend struct {
	supported uint64

	mu        sync.Mutex
	toGuest   [][]byte // whole packets (header + frame), oldest first
	fromGuest [][]byte
	offloads  []uint64 // every SetOffloads call
	reads     int      // ReadPacket calls
	writeErr  error
	closed    bool

	wake chan struct{} // a frame was queued (capacity 1)
	sent chan struct{} // the guest sent a frame (capacity 1)
}

var _ Backend = (*fakeBackend)(nil)

func newFakeBackend(supported uint64) *fakeBackend {
	return &fakeBackend{supported: supported, wake: make(chan struct{}, 1), sent: make(chan struct{}, 1)}
}

// deliver queues a packet (header + frame) for the guest.
func (f *fakeBackend) deliver(packet []byte) {
	f.mu.Lock()
	f.toGuest = append(f.toGuest, append([]byte(nil), packet...))
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fakeBackend) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.toGuest)
}

func (f *fakeBackend) readCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeBackend) sentFrames() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.fromGuest...)
}

// waitSent waits until n frames were sent in total.
func (f *fakeBackend) waitSent(n int, timeout time.Duration) [][]byte {
	deadline := time.After(timeout)
	for {
		if got := f.sentFrames(); len(got) >= n {
			return got
		}
		select {
		case <-f.sent:
		case <-deadline:
			return f.sentFrames()
		}
	}
}

func (f *fakeBackend) ReadPacket(bufs [][]byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if len(f.toGuest) == 0 {
		return 0, ErrNoPacket
	}
	p := f.toGuest[0]
	f.toGuest = f.toGuest[1:]
	n := 0
	for _, b := range bufs { // truncates like a TAP
		k := copy(b, p[n:])
		n += k
	}
	return n, nil
}

func (f *fakeBackend) WritePacket(bufs [][]byte) (int, error) {
	f.mu.Lock()
	if f.writeErr != nil {
		f.mu.Unlock()
		return 0, f.writeErr
	}
	var p []byte
	for _, b := range bufs {
		p = append(p, b...)
	}
	f.fromGuest = append(f.fromGuest, p)
	f.mu.Unlock()
	select {
	case f.sent <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (f *fakeBackend) WaitReadable(ctx context.Context) error {
	for {
		if f.pending() > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.wake:
		}
	}
}

func (f *fakeBackend) SupportedOffloads() uint64 { return f.supported }

func (f *fakeBackend) SetOffloads(features uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offloads = append(f.offloads, features)
	return nil
}

func (f *fakeBackend) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("closed twice")
	}
	f.closed = true
	return nil
}

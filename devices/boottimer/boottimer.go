package boottimer

import (
	"sync"
	"time"
)

// Port is the I/O port the guest writes; the device occupies only that one.
// Magic is the byte that means "userspace reached".
const (
	Port  = 0x440
	Magic = 123
)

// Timer is the boot timer device. It implements devices.Device.
type Timer struct {
	onBoot func(time.Time)
	now    func() time.Time // time.Now, replaceable in tests

	mu sync.Mutex
	s  State // guarded by mu
}

// State is the timer's saved state.
type State struct {
	// Reached is set once the guest has written Magic.
	Reached bool
	// At is the host time of that first write.
	At time.Time
}

// New returns a timer that calls onBoot (if not nil) with the time of the
// guest's first magic write. onBoot runs on the vCPU thread, so it must be
// quick: record or log the time and return.
func New(onBoot func(time.Time)) *Timer {
	return &Timer{onBoot: onBoot, now: time.Now}
}

// Read implements devices.Device. The port is write-only and reads 0.
func (t *Timer) Read(offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
	}
}

// Write implements devices.Device. A one-byte write of Magic at offset 0
// records the time if none has been recorded yet; anything else is ignored.
func (t *Timer) Write(offset uint64, data []byte) {
	if offset != 0 || len(data) != 1 || data[0] != Magic {
		return
	}
	at := t.now()
	t.mu.Lock()
	first := !t.s.Reached
	if first {
		t.s = State{Reached: true, At: at}
	}
	t.mu.Unlock()
	if first && t.onBoot != nil {
		t.onBoot(at)
	}
}

// Reached returns the time the guest reported reaching userspace, and false
// if it has not yet.
func (t *Timer) Reached() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s.At, t.s.Reached
}

// State returns the timer's state.
func (t *Timer) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s
}

// Restore replaces the timer's state. It does not call onBoot: a restored
// VM booted before its snapshot was taken.
func (t *Timer) Restore(s State) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s = s
	return nil
}

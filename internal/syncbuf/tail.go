package syncbuf

import "sync"

// Tail keeps the last bytes written to it, up to a limit: a console's end,
// shown when a guest fails, without keeping all of a long run's output.
type Tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

// NewTail returns a Tail keeping at most limit bytes.
func NewTail(limit int) *Tail { return &Tail{limit: limit} }

// Write appends p, dropping the oldest bytes beyond the limit.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

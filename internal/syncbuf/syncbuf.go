// Package syncbuf provides a byte buffer that one goroutine (a device, a
// vCPU thread) can write while another (a test) reads it.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor polls until the buffer contains want or the deadline passes, and
// reports whether it appeared.
func (b *Buffer) WaitFor(want string, deadline time.Time) bool {
	for {
		if strings.Contains(b.String(), want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

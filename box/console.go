package box

import (
	"io"
	"strings"
	"sync"
	"time"
)

// consoleTail passes the box's console through to w and keeps its last
// lines, so that a box that ends badly can say what it printed last
// (the console is often a terminal that has scrolled, or a CI log far
// away from the error). Every write is also a sign of life.
type consoleTail struct {
	w       io.Writer
	life    *life
	mu      sync.Mutex
	lines   []string // the last complete lines, oldest first
	partial []byte   // the line being written
	bug     string   // the first kernel BUG line, if any
}

const (
	tailLines   = 8   // lines a report shows
	tailLineMax = 200 // characters kept of each
)

func (c *consoleTail) Write(p []byte) (int, error) {
	c.life.console(time.Now())
	c.mu.Lock()
	for _, b := range p {
		switch {
		case b == '\n':
			if c.bug == "" && strings.Contains(string(c.partial), knownKernelBug) {
				c.bug = strings.TrimSpace(string(c.partial))
			}
			c.lines = append(c.lines, string(c.partial))
			if len(c.lines) > tailLines {
				c.lines = c.lines[1:]
			}
			c.partial = c.partial[:0]
		case b == '\r':
		case len(c.partial) < tailLineMax:
			if b < ' ' || b == 0x7f {
				b = '?' // no escape sequences in a report
			}
			c.partial = append(c.partial, b)
		}
	}
	c.mu.Unlock()
	return c.w.Write(p)
}

// knownKernelBug is how the box's known crash begins on its console
// (ErrBoxKernelBug). Only this one counts: a BUG line a guest kernel
// prints through a test's output is the test's business.
const knownKernelBug = "BUG: TASK stack guard page was hit"

// kernelBug is the box kernel's first line of its known crash, or "".
func (c *consoleTail) kernelBug() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bug
}

// tail returns the last lines, the unfinished one included, indented for
// a report; "(nothing)" when the box printed nothing.
func (c *consoleTail) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.lines
	if len(c.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(c.partial))
	}
	if len(lines) == 0 {
		return " (nothing)"
	}
	return "\n    " + strings.Join(lines, "\n    ")
}

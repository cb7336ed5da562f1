// Package rounds runs a benchmark's rounds so that one guest that dies or
// hangs costs the benchmark one round, not the whole run.
//
// Guests sometimes die or hang in the test box whichever VMM runs them (a
// few percent of boots: see ENVIRONMENT.md and BENCHMARKS.md). A benchmark
// therefore bounds every guest run with a deadline (Command), and Run
// replaces a failed round with a fresh one, a bounded number of times,
// keeping every failure for the report.
package rounds

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Failure is one failed round.
type Failure struct {
	Round int   // attempt number, from 1
	Err   error // what failed: often a *GuestError
}

// Result is what Run did.
type Result struct {
	Done     int       // rounds that succeeded
	Failures []Failure // rounds that failed, in order; each was replaced while replacements lasted
	GaveUp   bool      // the replacements ran out before Done reached the rounds wanted
}

// Run calls round with attempt numbers 1, 2, … until want rounds have
// succeeded. A round that returns an error is reported through logf,
// counted, and replaced by another, at most maxReplaced times over the
// whole run; after that Run stops with what it has (Result.GaveUp). A round
// must leave nothing behind when it fails: its partial figures are the
// caller's to drop.
func Run(want, maxReplaced int, round func(attempt int) error, logf func(format string, args ...any)) Result {
	var res Result
	for attempt := 1; res.Done < want; attempt++ {
		err := round(attempt)
		if err == nil {
			res.Done++
			continue
		}
		res.Failures = append(res.Failures, Failure{Round: attempt, Err: err})
		if len(res.Failures) > maxReplaced {
			logf("round %d failed, and %d failed rounds is more than the %d replacements allowed: stopping with %d of %d rounds: %v",
				attempt, len(res.Failures), maxReplaced, res.Done, want, err)
			res.GaveUp = true
			return res
		}
		logf("round %d failed (%d of %d replacements used), running another: %v", attempt, len(res.Failures), maxReplaced, err)
	}
	return res
}

// Summary is one line about the failures, for the end of a report.
func (r Result) Summary(want int) string {
	if len(r.Failures) == 0 {
		return fmt.Sprintf("%d of %d rounds, no failed guest", r.Done, want)
	}
	kinds := map[string]int{}
	for _, f := range r.Failures {
		var g *GuestError
		if errors.As(f.Err, &g) {
			kinds[g.Who+" "+g.Kind.String()]++
		} else {
			kinds["other"]++
		}
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	s := fmt.Sprintf("%d of %d rounds; %d failed rounds replaced (%s)", r.Done, want, len(r.Failures), strings.Join(parts, ", "))
	if r.GaveUp {
		s += "; GAVE UP: too many failures"
	}
	return s
}

// Kind says how a guest run failed.
type Kind int

const (
	Died Kind = iota // the VMM exited before the guest did what was expected
	Hung             // nothing happened before the deadline; the VMM was killed
)

func (k Kind) String() string {
	if k == Hung {
		return "hung"
	}
	return "died"
}

// GuestError is a guest run that died or hung, with the end of what it
// printed so that the report shows why.
type GuestError struct {
	Who     string // which VMM or build
	Kind    Kind
	Timeout time.Duration // Hung: the deadline it missed
	Exit    error         // Died: the process's exit error
	Tail    string        // its last output lines
}

func (e *GuestError) Error() string {
	s := fmt.Sprintf("%s: guest %s", e.Who, e.Kind)
	if e.Kind == Hung && e.Timeout > 0 {
		s += fmt.Sprintf(" (killed after %v)", e.Timeout)
	}
	if e.Exit != nil {
		s += fmt.Sprintf(" (%v)", e.Exit)
	}
	if e.Tail != "" {
		s += "; last output:\n    " + strings.ReplaceAll(e.Tail, "\n", "\n    ")
	}
	return s
}

// Tail keeps the last lines written to it (at most 8, and 2 KiB).
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 16<<10 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-4<<10:]...)
	}
	return len(p), nil
}

// String returns the kept lines, with control characters other than
// newlines dropped (guest consoles print escape sequences).
func (t *Tail) String() string {
	t.mu.Lock()
	b := bytes.TrimRight(t.buf, "\r\n")
	t.mu.Unlock()
	lines := strings.Split(string(b), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r >= ' ' && r != 0x7f {
			return r
		}
		return -1
	}, strings.Join(lines, "\n"))
	if len(s) > 2048 {
		s = s[len(s)-2048:]
	}
	return s
}

// Command runs cmd to its end with a deadline: past timeout it is killed
// and the run is Hung; a non-zero exit is Died. Its stdout and stderr go to
// out as well as to the tail in the error, unless the caller set them.
func Command(who string, cmd *exec.Cmd, timeout time.Duration, out io.Writer) error {
	var tail Tail
	w := io.Writer(&tail)
	if out != nil {
		w = io.MultiWriter(&tail, out)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = w
	}
	if cmd.Stderr == nil {
		cmd.Stderr = w
	}
	if cmd.WaitDelay == 0 {
		// A killed process's children may hold its output open; stop
		// waiting for them soon after it exits.
		cmd.WaitDelay = 2 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	return Wait(who, cmd, timeout, &tail)
}

// Wait waits for a started cmd with a deadline, as Command does; tail is
// what the error shows of its output (may be nil).
func Wait(who string, cmd *exec.Cmd, timeout time.Duration, tail *Tail) error {
	var hung bool
	var mu sync.Mutex
	timer := time.AfterFunc(timeout, func() {
		mu.Lock()
		hung = true
		mu.Unlock()
		cmd.Process.Kill()
	})
	err := cmd.Wait()
	timer.Stop()
	mu.Lock()
	defer mu.Unlock()
	text := ""
	if tail != nil {
		text = tail.String()
	}
	switch {
	case hung:
		return &GuestError{Who: who, Kind: Hung, Timeout: timeout, Tail: text}
	case err != nil:
		return &GuestError{Who: who, Kind: Died, Exit: err, Tail: text}
	}
	return nil
}

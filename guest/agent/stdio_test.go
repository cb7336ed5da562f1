package main

import (
	"testing"
	"time"

	"github.com/smolvm/smol/agent"
	"golang.org/x/sys/unix"
)

// TestTerminalStdio: the terminal has the asked size and follows a resize;
// closing the session's side ends a relay blocked reading it (a background
// job may hold the command's side open forever), and a resize after it
// fails quietly.
func TestTerminalStdio(t *testing.T) {
	s, err := newTTYStdio(24, 80)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	slave := s.child[0]
	size := func() (uint16, uint16) {
		ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			t.Fatal(err)
		}
		return ws.Row, ws.Col
	}
	if r, c := size(); r != 24 || c != 80 {
		t.Errorf("size %dx%d, want 24x80", r, c)
	}
	s.resize(agent.Winsize{Rows: 50, Cols: 132})
	if r, c := size(); r != 50 || c != 132 {
		t.Errorf("after a resize %dx%d, want 50x132", r, c)
	}

	read := make(chan error, 1)
	go func() {
		var b [64]byte
		_, err := s.stdout.Read(b[:])
		read <- err
	}()
	time.Sleep(100 * time.Millisecond) // the read is blocked: nothing was written
	s.stdin.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Error("a read of the closed terminal returned data")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the terminal did not end a read blocked on it")
	}
	s.resize(agent.Winsize{Rows: 10, Cols: 10}) // fails on the closed file
	slave.Close()
}

package main

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// escapeKey (Ctrl-A) followed by 'x' stops the VM from a terminal, where
// Ctrl-C belongs to the guest.
const escapeKey = 0x01

// console connects the host terminal to the guest's serial port. On a
// terminal it switches to raw mode so that keys reach the guest unmodified;
// it restores the terminal however smol exits.
type console struct {
	input   io.Reader
	escape  chan struct{}
	restore func()
}

func attachConsole() (*console, error) {
	c := &console{escape: make(chan struct{}), restore: func() {}}
	fd := int(os.Stdin.Fd())
	saved, ok := makeRaw(fd)
	if !ok {
		// Not a terminal: pass bytes through as they come.
		c.input = os.Stdin
		return c, nil
	}
	var once sync.Once
	c.restore = func() { once.Do(func() { unix.IoctlSetTermios(fd, unix.TCSETS, saved) }) }
	c.input = &escapeReader{r: os.Stdin, escape: c.escape}
	return c, nil
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal fd into raw mode (every key goes through, no
// echo, no signals from ^C) and returns its previous settings; ok is false
// when fd is not a terminal.
func makeRaw(fd int) (saved *unix.Termios, ok bool) {
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, false
	}
	raw := *saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, false
	}
	return saved, true
}

// escapeReader passes keys through and watches for Ctrl-A x.
type escapeReader struct {
	r       io.Reader
	escape  chan struct{}
	pending bool // the previous byte was Ctrl-A
	fired   bool
}

func (e *escapeReader) Read(p []byte) (int, error) {
	if len(p) < 2 {
		return 0, io.ErrShortBuffer // a held-back Ctrl-A plus one key need two bytes
	}
	in := make([]byte, len(p)-1)
	n, err := e.r.Read(in)
	out := p[:0]
	for _, b := range in[:n] {
		switch {
		case e.pending && b == 'x':
			if !e.fired {
				e.fired = true
				close(e.escape)
			}
			e.pending = false
			continue
		case e.pending && b == escapeKey: // Ctrl-A Ctrl-A sends one Ctrl-A
			e.pending = false
		case e.pending:
			out = append(out, escapeKey)
			e.pending = false
		case b == escapeKey:
			e.pending = true
			continue
		}
		out = append(out, b)
	}
	return len(out), err
}

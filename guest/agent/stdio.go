package main

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/smolvm/smol/agent"
	"golang.org/x/sys/unix"
)

// stdio is a command's standard streams: three pipes, or one terminal.
type stdio struct {
	child     [3]*os.File // the command's ends
	stdin     *os.File    // the agent's ends
	stdout    *os.File
	stderr    *os.File // nil with a terminal
	resize    func(agent.Winsize)
	stdinOnce sync.Once
}

func newPipeStdio() (*stdio, error) {
	s := &stdio{}
	var err error
	if s.child[0], s.stdin, err = os.Pipe(); err != nil {
		return nil, err
	}
	if s.stdout, s.child[1], err = os.Pipe(); err != nil {
		s.close()
		return nil, err
	}
	if s.stderr, s.child[2], err = os.Pipe(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// newTTYStdio opens a pseudo-terminal pair on /dev/pts of the given size.
// The master is used only through its file (never Fd, which would make it
// blocking): closing it then ends a relay's read, and a resize that
// arrives as the session closes fails on the closed file instead of
// reaching whatever reused its number (another command's terminal).
func newTTYStdio(rows, cols uint16) (*stdio, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	conn, err := master.SyscallConn()
	if err != nil {
		master.Close()
		return nil, err
	}
	var n int
	var ptyErr error
	err = conn.Control(func(fd uintptr) {
		var unlock int32
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
			ptyErr = fmt.Errorf("unlock pty: %w", e)
			return
		}
		if n, ptyErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN); ptyErr != nil {
			ptyErr = fmt.Errorf("pty number: %w", ptyErr)
		}
	})
	if err == nil {
		err = ptyErr
	}
	if err != nil {
		master.Close()
		return nil, err
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, err
	}
	resize := func(ws agent.Winsize) {
		conn.Control(func(fd uintptr) {
			unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
		})
	}
	if rows > 0 && cols > 0 {
		resize(agent.Winsize{Rows: rows, Cols: cols})
	}
	return &stdio{child: [3]*os.File{slave, slave, slave}, stdin: master, stdout: master, resize: resize}, nil
}

// closeChildEnds closes the command's ends in the agent once the command
// has them, so that its exit ends the output streams.
func (s *stdio) closeChildEnds() {
	closed := map[*os.File]bool{}
	for i, f := range s.child {
		if f != nil && !closed[f] {
			f.Close()
			closed[f] = true
		}
		s.child[i] = nil
	}
}

// closeStdin ends the command's input (pipes only; a terminal's master is
// also its output).
func (s *stdio) closeStdin() {
	if s.stdin == s.stdout {
		return
	}
	s.stdinOnce.Do(func() { s.stdin.Close() })
}

func (s *stdio) close() {
	s.closeChildEnds()
	s.closeStdin()
	for _, f := range []*os.File{s.stdout, s.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

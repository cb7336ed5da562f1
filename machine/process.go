package machine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// peerProcess is a pidfd of the process at the other end of a control
// socket connection: the VMM, which made the listening socket. A pidfd
// names one process for its whole life, so waiting on it cannot mistake
// a later process that reuses the pid for the VMM.
type peerProcess struct {
	fd  int
	pid int32
}

// openPeerProcess opens the pidfd of conn's peer. It returns nil, and no
// error, where the peer's pid is not visible (a peer in another PID
// namespace reads as pid 0) or is this process: the caller then cannot
// wait for it.
func openPeerProcess(conn *net.UnixConn) (*peerProcess, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if credErr != nil {
		return nil, fmt.Errorf("the control socket's peer: %w", credErr)
	}
	if cred.Pid <= 0 || int(cred.Pid) == os.Getpid() {
		return nil, nil // or a VMM served in this process, which cannot wait for its own end
	}
	fd, err := unix.PidfdOpen(int(cred.Pid), unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("%w (its process %d has exited)", ErrNoVMM, cred.Pid)
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd of the VMM process %d: %w", cred.Pid, err)
	}
	return &peerProcess{fd: fd, pid: cred.Pid}, nil
}

// waitExit returns once the process has exited (a pidfd polls readable
// then), or with an error after limit or when ctx ends.
func (p *peerProcess) waitExit(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		// Short polls, so that ctx is seen: a pidfd has no deadline.
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("waiting for the VMM process %d: %w", p.pid, err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the VMM process %d has not exited %v after its machine stopped", p.pid, limit)
		}
	}
}

func (p *peerProcess) Close() error { return unix.Close(p.fd) }

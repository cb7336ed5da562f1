package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dialHost connects to the host's vsock port, retrying while the vsock
// device is still being set up.
//
// Each attempt may wait for the host's answer until the deadline, not for
// the kernel's default of 2 s. An attempt that gives up early is worse
// than slow: the host may have accepted the connection already (its
// RESPONSE crossing the guest's timeout, which Linux answers with RST),
// so the host holds a dead session while the guest's next attempt waits
// unanswered in its listener's backlog. A host stalled for 2 s (a busy
// or nested host) was enough for that.
func dialHost(port uint32, patience time.Duration) (*os.File, error) {
	deadline := time.Now().Add(patience)
	for {
		fd, err := connectHost(port, time.Until(deadline))
		if err == nil {
			return os.NewFile(uintptr(fd), fmt.Sprintf("vsock:2:%d", port)), nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to the host on vsock port %d: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connectHost makes one attempt to connect to the host's port, waiting at
// most wait for its answer, and returns the connected, non-blocking socket.
func connectHost(port uint32, wait time.Duration) (int, error) {
	fd, err := vsockSocketWaiting(wait)
	if err != nil {
		return -1, err
	}
	err = unix.Connect(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_HOST, Port: port})
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// minConnectWait is the shortest wait for the host's answer that an attempt
// is given, even when the patience is spent: a last, short chance.
const minConnectWait = 100 * time.Millisecond

// vsockSocketWaiting returns a vsock stream socket whose connect waits
// up to wait (at least minConnectWait) for the peer's answer.
func vsockSocketWaiting(wait time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval(max(wait, minConnectWait).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.AF_VSOCK, unix.SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("vsock connect timeout: %w", err)
	}
	return fd, nil
}

// A connection's socket is non-blocking, so that its *os.File goes
// through Go's poller: its deadlines then hold (a session waits a bounded
// time for the host to hang up), and closing it ends a read in progress.
// The listening socket blocks its own thread in accept.
type vsockListener struct{ fd int }

func listenVsock(port uint32) (*vsockListener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &vsockListener{fd: fd}, nil
}

func (l *vsockListener) accept() (*os.File, error) {
	for {
		nfd, _, err := unix.Accept4(l.fd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(nfd), "vsock-exec"), nil
	}
}

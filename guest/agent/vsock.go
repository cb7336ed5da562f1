package main

import (
	"fmt"
	"os"
	"time"

	"github.com/smolvm/smol/guest/vsockdial"
	"golang.org/x/sys/unix"
)

// dialHost connects to the host's vsock port, retrying while the vsock
// device is still being set up. Each attempt waits for the host's answer
// for the rest of patience (vsockdial says why that matters).
func dialHost(port uint32, patience time.Duration) (*os.File, error) {
	deadline := time.Now().Add(patience)
	for {
		fd, err := vsockdial.Connect(unix.VMADDR_CID_HOST, port, time.Until(deadline))
		if err == nil {
			if err = unix.SetNonblock(fd, true); err == nil {
				return os.NewFile(uintptr(fd), fmt.Sprintf("vsock:2:%d", port)), nil
			}
			unix.Close(fd)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to the host on vsock port %d: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// Package vsockdial connects guest programs to vsock ports, each attempt
// waiting for the peer's answer as long as its caller allows rather than
// for Linux's default of 2 s.
//
// Why: a connect that gives up early is worse than a slow one. The peer
// may have accepted the connection already, its RESPONSE crossing the
// guest's timeout; Linux answers that RESPONSE with RST (af_vsock.c says
// so beside its ETIMEDOUT), so the host holds a dead connection while the
// guest sees a failure, and a retry waits unanswered in the host
// listener's backlog. A host that stood still for 2 s (busy, or nested)
// was enough for that: the smol agent's boot connection failed so in CI.
package vsockdial

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// MinWait is the shortest wait for the peer's answer an attempt is given,
// even when the caller's time is spent: a last, short chance.
const MinWait = 100 * time.Millisecond

// Connect makes one attempt to connect to port on cid, waiting at most
// wait (at least MinWait) for the peer's answer, and returns the
// connected socket, blocking, close-on-exec.
func Connect(cid, port uint32, wait time.Duration) (int, error) {
	fd, err := Socket(wait)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: cid, Port: port}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %d:%d: %w", cid, port, err)
	}
	return fd, nil
}

// Socket returns a vsock stream socket whose connect waits up to wait (at
// least MinWait) for the peer's answer.
func Socket(wait time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("vsock socket: %w", err)
	}
	tv := unix.NsecToTimeval(max(wait, MinWait).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.AF_VSOCK, unix.SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("vsock connect timeout: %w", err)
	}
	return fd, nil
}

package main

import (
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// acceptor is a listener of any socket family the guest's streams arrive
// on: TCP, Unix (smol's vsock) or AF_VSOCK (vhost-vsock).
type acceptor interface {
	accept() (io.ReadWriteCloser, error)
	Close() error
}

type tcpAcceptor struct{ net.Listener }

func (l tcpAcceptor) accept() (io.ReadWriteCloser, error) { return l.Accept() }

// acceptLoop serves every connection with handle until the listener closes.
func acceptLoop(l acceptor, handle func(io.ReadWriteCloser)) {
	for {
		c, err := l.accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// vsockListener is a host AF_VSOCK listening socket, the host end of QEMU's
// vhost-vsock device. The standard library has no vsock, so it is a
// non-blocking file served by the runtime's poller, which also lets Close
// end a pending accept.
type vsockListener struct{ f *os.File }

func listenVsock(port uint32) (*vsockListener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_VSOCK socket (is vhost-vsock available?): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind vsock port %d: %w", port, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen on vsock port %d: %w", port, err)
	}
	return &vsockListener{os.NewFile(uintptr(fd), fmt.Sprintf("vsock:%d", port))}, nil
}

func (l *vsockListener) accept() (io.ReadWriteCloser, error) {
	raw, err := l.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var aerr error
	err = raw.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		return aerr != unix.EAGAIN
	})
	if err != nil {
		return nil, err
	}
	if aerr != nil {
		return nil, fmt.Errorf("vsock accept: %w", aerr)
	}
	return os.NewFile(uintptr(nfd), "vsock-conn"), nil
}

func (l *vsockListener) Close() error { return l.f.Close() }

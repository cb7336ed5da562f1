package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/smolvm/smol/guest/vsockdial"
	"golang.org/x/sys/unix"
)

// streamChunk is what one write sends: large enough that system calls do
// not dominate, as a bulk copy would use.
const streamChunk = 256 << 10

// streamConn is a byte stream the benchmark can half-close and bound in
// time: a TCP connection or a vsock socket.
type streamConn interface {
	io.ReadWriteCloser
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	CloseWrite() error
}

// streamBench measures one direction of a stream the peer serves.
//
// Sending: write for secs seconds, half-close, and wait for the peer to
// close after reading everything; the time runs until that close, so every
// byte counted has arrived. Receiving: read what the peer streams for secs
// seconds, then close.
func streamBench(name string, dial func() (streamConn, error), send bool, secs float64) error {
	conn, err := dialRetry(dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	d := time.Duration(secs * float64(time.Second))
	buf := make([]byte, streamChunk)
	for i := range buf {
		buf[i] = byte(i*13 + 5)
	}
	var total int64
	start := time.Now()
	if send {
		// A write the peer never drains must not hang the guest: give up
		// well after the measurement should have ended.
		conn.SetWriteDeadline(start.Add(d + 30*time.Second))
		for time.Since(start) < d {
			n, err := conn.Write(buf)
			total += int64(n)
			if err != nil {
				return fmt.Errorf("%s: write after %d bytes: %w", name, total, err)
			}
		}
		if err := conn.CloseWrite(); err != nil {
			return fmt.Errorf("%s: half-close: %w", name, err)
		}
		// The peer closes once it has read everything; give it as long again.
		conn.SetReadDeadline(time.Now().Add(d + 30*time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			return fmt.Errorf("%s: waiting for the peer to finish reading: %w", name, err)
		}
	} else {
		conn.SetReadDeadline(start.Add(d))
		for {
			n, err := conn.Read(buf)
			total += int64(n)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: read after %d bytes: %w", name, total, err)
			}
		}
	}
	result(name, mbps(total, time.Since(start)), "MB/s")
	return nil
}

// dialRetry dials a few times: right after the guest's link comes up, the
// first SYN may be lost to neighbour discovery.
func dialRetry(dial func() (streamConn, error)) (streamConn, error) {
	var err error
	for i := 0; i < 10; i++ {
		var c streamConn
		if c, err = dial(); err == nil {
			return c, nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return nil, err
}

func dialTCP(addr string) (streamConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// vsockConn is a connected vsock socket in non-blocking mode, so that the
// runtime poller serves it and read deadlines work.
type vsockConn struct{ *os.File }

func (c vsockConn) CloseWrite() error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return serr
}

func dialVsockStream(cid, port uint32) (streamConn, error) {
	fd, err := vsockdial.Connect(cid, port, vsockConnectWait)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock non-blocking: %w", err)
	}
	return vsockConn{os.NewFile(uintptr(fd), "vsock")}, nil
}

// connectBench opens and closes TCP connections to addr one after another
// for secs and prints the rate: the cost of setting a connection up
// through the guest's network, end to end.
func connectBench(addr string, secs float64) error {
	d := time.Duration(secs * float64(time.Second))
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("tcp-connect %s after %d connections: %w", addr, n, err)
		}
		// Wait for the server's close, so each connection is complete.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		c.Read(make([]byte, 1))
		c.Close()
		n++
	}
	result("tcp-connect", float64(n)/time.Since(start).Seconds(), "conn/s")
	return nil
}

// Command nettool is a small static program for test guests: echo servers
// and echo clients that check what comes back, over vsock and TCP. Busybox
// has no vsock support and its nc cannot check a round trip.
//
//	nettool serve PORT                 echo every vsock connection on PORT until killed
//	nettool echo CID PORT BYTES [N]    N concurrent vsock connections to CID:PORT, each
//	                                   sending BYTES and checking the echo
//	nettool tcp-echo ADDR BYTES [N]    the same over TCP to ADDR (host:port)
package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	switch os.Args[1] {
	case "serve":
		serve(atoi(os.Args[2]))
	case "echo":
		if len(os.Args) < 5 {
			usage()
		}
		cid, port := uint32(atoi(os.Args[2])), uint32(atoi(os.Args[3]))
		echo(func() (io.ReadWriteCloser, error) { return dialVsock(cid, port) }, atoi(os.Args[4]), optionalCount(5))
	case "tcp-echo":
		if len(os.Args) < 4 {
			usage()
		}
		addr := os.Args[2]
		echo(func() (io.ReadWriteCloser, error) { return net.Dial("tcp", addr) }, atoi(os.Args[3]), optionalCount(4))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: nettool serve PORT | nettool echo CID PORT BYTES [CONNS] | nettool tcp-echo ADDR BYTES [CONNS]")
	os.Exit(2)
}

func optionalCount(i int) int {
	if len(os.Args) > i {
		return atoi(os.Args[i])
	}
	return 1
}

func dialVsock(cid, port uint32) (io.ReadWriteCloser, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: cid, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect %d:%d: %w", cid, port, err)
	}
	return os.NewFile(uintptr(fd), "vsock"), nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettool: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

func serve(port int) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	check(err)
	check(unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: uint32(port)}))
	check(unix.Listen(fd, 64))
	fmt.Printf("nettool: serving on port %d\n", port)
	for {
		c, _, err := unix.Accept(fd)
		if err != nil {
			continue
		}
		go func() {
			f := os.NewFile(uintptr(c), "vsock")
			defer f.Close()
			io.Copy(f, f)
		}()
	}
}

// echo opens conns connections, sends size pseudo-random bytes on each
// while reading the echo back, and compares checksums.
func echo(dial func() (io.ReadWriteCloser, error), size, conns int) {
	var wg sync.WaitGroup
	failed := make(chan error, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := echoOne(dial, size, uint64(i)); err != nil {
				failed <- fmt.Errorf("connection %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(failed)
	bad := 0
	for err := range failed {
		fmt.Printf("nettool: %v\n", err)
		bad++
	}
	if bad > 0 {
		os.Exit(1)
	}
	fmt.Printf("nettool: echo-ok %d connections x %d bytes\n", conns, size)
}

func echoOne(dial func() (io.ReadWriteCloser, error), size int, seed uint64) error {
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	sent, got := sha256.New(), sha256.New()
	done := make(chan error, 1)
	go func() {
		n, err := io.CopyN(got, conn, int64(size))
		if err == nil && n != int64(size) {
			err = io.ErrUnexpectedEOF
		}
		done <- err
	}()
	r := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 64<<10)
	for left := size; left > 0; {
		n := min(left, len(buf))
		for i := range buf[:n] {
			buf[i] = byte(r.Uint32())
		}
		sent.Write(buf[:n])
		if _, err := conn.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	if err := <-done; err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if string(sent.Sum(nil)) != string(got.Sum(nil)) {
		return fmt.Errorf("echo differs from what was sent")
	}
	return nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettool: %v\n", err)
		os.Exit(1)
	}
}

package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

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

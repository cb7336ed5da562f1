// Command vsocktool is a small static program for test guests: a vsock echo
// server and an echo client that checks what comes back. Busybox has no
// vsock support, and the integration tests need both directions.
//
//	vsocktool serve PORT                 echo every connection on PORT until killed
//	vsocktool echo CID PORT BYTES [N]    N concurrent connections to CID:PORT, each
//	                                     sending BYTES and checking the echo
package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
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
		n := 1
		if len(os.Args) > 5 {
			n = atoi(os.Args[5])
		}
		echo(uint32(atoi(os.Args[2])), uint32(atoi(os.Args[3])), atoi(os.Args[4]), n)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vsocktool serve PORT | vsocktool echo CID PORT BYTES [CONNS]")
	os.Exit(2)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vsocktool: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

func serve(port int) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	check(err)
	check(unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: uint32(port)}))
	check(unix.Listen(fd, 64))
	fmt.Printf("vsocktool: serving on port %d\n", port)
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
func echo(cid, port uint32, size, conns int) {
	var wg sync.WaitGroup
	failed := make(chan error, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := echoOne(cid, port, size, uint64(i)); err != nil {
				failed <- fmt.Errorf("connection %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(failed)
	bad := 0
	for err := range failed {
		fmt.Printf("vsocktool: %v\n", err)
		bad++
	}
	if bad > 0 {
		os.Exit(1)
	}
	fmt.Printf("vsocktool: echo-ok %d connections x %d bytes\n", conns, size)
}

func echoOne(cid, port uint32, size int, seed uint64) error {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: cid, Port: port}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("connect %d:%d: %w", cid, port, err)
	}
	conn := os.NewFile(uintptr(fd), "vsock")
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
		fmt.Fprintf(os.Stderr, "vsocktool: %v\n", err)
		os.Exit(1)
	}
}

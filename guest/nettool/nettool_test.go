package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
)

// captureResults collects what result prints during the test.
func captureResults(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	old := resultOut
	resultOut = &buf
	t.Cleanup(func() { resultOut = old })
	return &buf
}

// positiveResult returns the value of the named measurement, failing the
// test unless it is there and above zero.
func positiveResult(t *testing.T, out, name, unit string) float64 {
	t.Helper()
	m := regexp.MustCompile(`nettool-result ` + name + ` ([0-9.]+) ` + regexp.QuoteMeta(unit) + `\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s result in %q", name, out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	if v <= 0 {
		t.Fatalf("%s = %v, want > 0", name, v)
	}
	return v
}

// TestStreamBothDirections runs the send and receive measurements against
// a host-style sink (reads to EOF, then closes) and source (writes until
// the reader goes away). A send that did not half-close, or a receive that
// did not stop at its deadline, would hang until the test times out.
func TestStreamBothDirections(t *testing.T) {
	out := captureResults(t)
	serve := func(handle func(net.Conn)) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return l.Addr().String()
	}
	sinkAddr := serve(func(c net.Conn) { defer c.Close(); io.Copy(io.Discard, c) })
	sourceAddr := serve(func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	if err := streamBench("tcp-send", func() (streamConn, error) { return dialTCP(sinkAddr) }, true, 0.2); err != nil {
		t.Fatal(err)
	}
	if err := streamBench("tcp-recv", func() (streamConn, error) { return dialTCP(sourceAddr) }, false, 0.2); err != nil {
		t.Fatal(err)
	}
	positiveResult(t, out.String(), "tcp-send", "MB/s")
	positiveResult(t, out.String(), "tcp-recv", "MB/s")
}

// TestStreamReceiveFailsOnEarlyEOF: a source that stops before the
// measurement ends is an error, never a (wrong) rate.
func TestStreamReceiveFailsOnEarlyEOF(t *testing.T) {
	out := captureResults(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte("short"))
			c.Close()
		}
	}()
	err = streamBench("tcp-recv", func() (streamConn, error) { return dialTCP(l.Addr().String()) }, false, 5)
	if err == nil {
		t.Fatalf("a stream that ended early gave a result: %q", out.String())
	}
	if out.Len() != 0 {
		t.Fatalf("printed %q for a failed measurement", out.String())
	}
}

// TestDiskBenchOnFile runs the disk measurements on a regular file, which
// takes the same O_DIRECT reads and writes as a block device.
func TestDiskBenchOnFile(t *testing.T) {
	out := captureResults(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	err := diskBench(img, 0.1, 4)
	if errors.Is(err, syscall.EINVAL) {
		t.Skipf("the temporary directory has no O_DIRECT (tmpfs?): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	positiveResult(t, out.String(), "blk-seq-write", "MB/s")
	positiveResult(t, out.String(), "blk-seq-read", "MB/s")
	positiveResult(t, out.String(), "blk-rand-read", "IOPS")
	// The write pass left its pattern in the file.
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != 1 || data[1] != 8 {
		t.Fatalf("file starts %v, want the write pattern 1, 8", data[:2])
	}
}

func TestDiskBenchRejectsSmallDevice(t *testing.T) {
	captureResults(t)
	img := filepath.Join(t.TempDir(), "small.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := diskBench(img, 0.1, 1); err == nil {
		t.Fatal("a 4 KiB device was accepted")
	}
}

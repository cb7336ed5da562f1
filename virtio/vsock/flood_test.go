package vsock

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Flood durations for TestRequestResetFlood. The security issue asks that a
// hostile guest flooding for 10 s leaves the host bounded; -short (the
// everyday unit-test run) floods for less.
const (
	floodDuration      = 10 * time.Second
	floodDurationShort = 2 * time.Second
)

// floodSlack is what TestRequestResetFlood allows above the documented
// bounds: the test's own acceptor, and goroutines of closed connections
// that have not been scheduled yet to notice their socket closed.
const floodSlack = 64

// openFDs counts the file descriptors this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

// TestRequestResetFlood plays a hostile guest that opens a connection to a
// live host listener and resets it at once, in a loop, as fast as the device
// takes packets. Every REQUEST starts a dial; the guest's RST usually
// arrives before the dial finishes. The host must stay within the bounds the
// package documents (connectionGoroutines and connectionSockets, from
// maxConns) throughout, and a well-behaved connection must work afterwards.
func TestRequestResetFlood(t *testing.T) {
	duration := floodDuration
	if testing.Short() {
		duration = floodDurationShort
	}
	g := newTestGuest(t, 4096, 128)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: g.path + "_1234", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// During the flood the host program accepts and closes at once, so the
	// test itself holds no fds or goroutines per connection and what is
	// counted is the device's. Afterwards it echoes.
	var echo atomic.Bool
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			if !echo.Load() {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					c.CloseWrite()
				}
			}()
		}
	}()

	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	limitG := baseG + connectionGoroutines + floodSlack
	limitFD := baseFD + connectionSockets + floodSlack
	peakG, peakFD := baseG, baseFD
	port := uint32(1 << 20)
	pairs := 0
	start := time.Now()
	for time.Since(start) < duration {
		for range 64 {
			g.send(Header{SrcPort: port, DstPort: 1234, Op: OpRequest, BufAlloc: 4096}, nil)
			g.send(Header{SrcPort: port, DstPort: 1234, Op: OpRST}, nil)
			port++
			pairs++
		}
		g.poll()
		g.inbox = g.inbox[:0] // the device's RSTs and RESPONSEs: the flood ignores them
		ng, nfd := runtime.NumGoroutine(), openFDs(t)
		peakG, peakFD = max(peakG, ng), max(peakFD, nfd)
		if ng > limitG || nfd > limitFD {
			t.Fatalf("after %d REQUEST/RST pairs in %v: %d goroutines (%d before, limit %d), %d open fds (%d before, limit %d)",
				pairs, time.Since(start).Round(time.Millisecond), ng, baseG, limitG, nfd, baseFD, limitFD)
		}
	}
	t.Logf("%d REQUEST/RST pairs in %v; peak %d goroutines (%d before, limit %d), %d open fds (%d before, limit %d)",
		pairs, duration, peakG, baseG, limitG, peakFD, baseFD, limitFD)
	if pairs < 1000 {
		t.Errorf("only %d pairs in %v: the device stopped taking the guest's packets", pairs, duration)
	}

	// The slots of the flood's dials come back once those dials report;
	// until then a new REQUEST may be refused, so try a few times.
	echo.Store(true)
	var s *guestStream
	deadline := time.Now().Add(10 * time.Second)
	for s == nil {
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted within 10s of the flood's end")
		}
		guestPort := port
		port++
		g.send(Header{SrcPort: guestPort, DstPort: 1234, Op: OpRequest, BufAlloc: 64 << 10}, nil)
		p := g.recv(func(h Header) bool { return h.DstPort == guestPort })
		if p.h.Op == OpResponse {
			s = &guestStream{t: t, guestPort: guestPort, hostPort: 1234, bufAlloc: 64 << 10,
				devBufAlloc: p.h.BufAlloc, devFwdCnt: p.h.FwdCnt, maxPacket: 4096}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	blob := randomBytes(t, 256<<10)
	s.out = blob
	streams := streamsOf(s)
	g.run(streams, 30*time.Second, allReset(streams))
	checkStream(t, s, blob)
}

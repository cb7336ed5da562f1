package vsock

import (
	"crypto/sha256"
	"hash"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

// testGuest plays the guest's virtio-vsock driver against a Device behind
// the real virtio-mmio transport: it owns the three driver queues in a real
// guest memory, keeps rx buffers posted, sends packets on tx, and hands the
// packets it receives to the test. It is driven from the test goroutine
// only; host programs run on their own goroutines.
type testGuest struct {
	t     *testing.T
	mem   *memory.Guest
	dev   *Device
	drv   *virtiotest.Driver
	irq   *virtiotest.IRQ
	path  string
	rxBuf uint32
	inbox []outPacket
}

// socketDir returns a short temporary directory: Unix socket paths must fit
// 107 bytes, which t.TempDir's long names can exceed.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newTestGuest creates a device on a fresh socket, initialises it through
// the transport and posts rxCount receive buffers of rxBuf bytes each
// (header included) and 8 event buffers.
func newTestGuest(t *testing.T, rxBuf uint32, rxCount int) *testGuest {
	t.Helper()
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(socketDir(t), "v.sock")
	dev, err := New(Config{UDSPath: path})
	if err != nil {
		t.Fatal(err)
	}
	irq := virtiotest.NewIRQ()
	transport := virtio.NewMMIO(dev, mem, irq)
	drv := virtiotest.Init(t, transport, mem, virtiotest.Options{})
	if len(drv.Queues) != numQueues {
		t.Fatalf("device has %d queues, want %d", len(drv.Queues), numQueues)
	}
	g := &testGuest{t: t, mem: mem, dev: dev, drv: drv, irq: irq, path: path, rxBuf: rxBuf}
	t.Cleanup(func() {
		drv.Reset()
		if err := dev.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		mem.Close()
	})
	for range rxCount {
		g.rx().AddChain(nil, []uint32{rxBuf})
	}
	for range 8 {
		g.ev().AddChain(nil, []uint32{4})
	}
	g.drv.Notify(rxQueue)
	g.drv.Notify(eventQueue)
	return g
}

func (g *testGuest) rx() *virtiotest.DriverQueue { return g.drv.Queues[rxQueue] }
func (g *testGuest) tx() *virtiotest.DriverQueue { return g.drv.Queues[txQueue] }
func (g *testGuest) ev() *virtiotest.DriverQueue { return g.drv.Queues[eventQueue] }

// sendRaw queues a tx chain of the given readable buffers.
func (g *testGuest) sendRaw(bufs ...[]byte) {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.tx().Used(); g.tx().Inflight() > int(g.tx().Size())/2-2; g.tx().Used() {
		if time.Now().After(deadline) {
			g.t.Fatal("device stopped consuming the tx queue")
		}
		g.poll() // the device may be waiting for rx buffers
		time.Sleep(100 * time.Microsecond)
	}
	g.tx().AddChain(bufs, nil)
	g.drv.Notify(txQueue)
}

// send sends one packet from the guest; addressing defaults are filled in.
func (g *testGuest) send(h Header, payload []byte) {
	g.t.Helper()
	if h.SrcCID == 0 {
		h.SrcCID = DefaultCID
	}
	if h.DstCID == 0 {
		h.DstCID = HostCID
	}
	if h.Type == 0 {
		h.Type = TypeStream
	}
	h.Len = uint32(len(payload))
	if len(payload) == 0 {
		g.sendRaw(h.Bytes())
	} else {
		g.sendRaw(h.Bytes(), payload)
	}
}

// poll moves received packets to the inbox and reposts their buffers; it
// reports whether anything arrived.
func (g *testGuest) poll() bool {
	g.t.Helper()
	used := g.rx().Used()
	for _, u := range used {
		if u.Len != 0 {
			h, err := ParseHeader(u.Data)
			if err != nil {
				g.t.Fatalf("device wrote a bad packet (%d bytes): %v", u.Len, err)
			}
			if h.SrcCID != HostCID || h.DstCID != DefaultCID || (h.Type != TypeStream && h.Op != OpRST) || int(u.Len) != HeaderSize+int(h.Len) {
				g.t.Fatalf("device wrote bad header %+v in %d bytes", h, u.Len)
			}
			g.inbox = append(g.inbox, outPacket{h, u.Data[HeaderSize:]})
		}
		g.rx().AddChain(nil, []uint32{g.rxBuf})
	}
	if len(used) > 0 {
		g.drv.Notify(rxQueue)
	}
	return len(used) > 0
}

// recv waits for the first packet that match accepts and removes it from
// the inbox.
func (g *testGuest) recv(match func(Header) bool) outPacket {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.poll()
		for i, p := range g.inbox {
			if match(p.h) {
				g.inbox = append(g.inbox[:i], g.inbox[i+1:]...)
				return p
			}
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("no matching packet within 10s; inbox %v", g.inbox)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// quiet checks that no packet arrives for d.
func (g *testGuest) quiet(d time.Duration) {
	g.t.Helper()
	time.Sleep(d)
	g.poll()
	if len(g.inbox) != 0 {
		g.t.Fatalf("unexpected packets %v", g.inbox)
	}
}

func isOp(op Op) func(Header) bool { return func(h Header) bool { return h.Op == op } }

// guestStream is the guest end of one connection in a transfer test: it
// sends out and collects what arrives, keeping the credit rules from the
// guest's side and checking that the device keeps them from its side.
type guestStream struct {
	t                   *testing.T
	guestPort, hostPort uint32
	bufAlloc            uint32 // the buffer the guest advertises
	rxTotal             uint32 // payload received (consumed at once)
	fwdSent             uint32 // the fwd_cnt the device last heard
	devBufAlloc         uint32 // the device's credit
	devFwdCnt           uint32
	txCnt               uint32
	out                 []byte // still to send
	maxPacket           int    // largest RW the guest sends
	sentShutdown        bool
	echo                bool // send back what arrives; SHUTDOWN only after the device's
	creditStalls        int  // times the guest had data but no credit
	received            sha256Stream
	gotShutdown         uint32
	gotRST              bool
}

// sha256Stream hashes a stream as it arrives.
type sha256Stream struct {
	n int
	h hash.Hash
}

func (s *sha256Stream) write(p []byte) {
	if s.h == nil {
		s.h = sha256.New()
	}
	s.h.Write(p)
	s.n += len(p)
}

func (s *sha256Stream) digest() [32]byte {
	if s.h == nil {
		s.h = sha256.New()
	}
	return [32]byte(s.h.Sum(nil))
}

func (s *guestStream) header(op Op) Header {
	s.fwdSent = s.rxTotal
	return Header{SrcPort: s.guestPort, DstPort: s.hostPort, Op: op, BufAlloc: s.bufAlloc, FwdCnt: s.rxTotal}
}

// handle applies one packet from the device.
func (s *guestStream) handle(g *testGuest, p outPacket) {
	s.devBufAlloc, s.devFwdCnt = p.h.BufAlloc, p.h.FwdCnt
	switch p.h.Op {
	case OpRW:
		if s.gotShutdown&ShutdownSend != 0 {
			s.t.Errorf("port %d: data after SHUTDOWN(SEND)", s.guestPort)
		}
		s.rxTotal += p.h.Len
		if inFlight := s.rxTotal - s.fwdSent; inFlight > s.bufAlloc {
			s.t.Errorf("port %d: device sent %d bytes beyond fwd_cnt %d, buffer is %d", s.guestPort, inFlight, s.fwdSent, s.bufAlloc)
		}
		s.received.write(p.payload)
		if s.echo {
			s.out = append(s.out, p.payload...)
		}
		// Tell the device only once half the buffer is consumed, so its
		// credit really runs out between updates.
		if s.rxTotal-s.fwdSent >= s.bufAlloc/2 {
			g.send(s.header(OpCreditUpdate), nil)
		}
	case OpShutdown:
		s.gotShutdown |= p.h.Flags
	case OpRST:
		s.gotRST = true
	case OpCreditUpdate, OpCreditRequest:
		if p.h.Op == OpCreditRequest {
			g.send(s.header(OpCreditUpdate), nil)
		}
	default:
		s.t.Errorf("port %d: unexpected %v", s.guestPort, p.h.Op)
	}
}

// pushData sends as much of out as the device's credit allows, then
// SHUTDOWN(SEND) once all of it went.
func (s *guestStream) pushData(g *testGuest) {
	for len(s.out) > 0 {
		inFlight := s.txCnt - s.devFwdCnt
		if inFlight >= s.devBufAlloc {
			s.creditStalls++
			return // wait for the device's CREDIT_UPDATE
		}
		n := min(len(s.out), s.maxPacket, int(s.devBufAlloc-inFlight))
		g.send(s.header(OpRW), s.out[:n])
		s.out = s.out[n:]
		s.txCnt += uint32(n)
	}
	if !s.sentShutdown && (!s.echo || s.gotShutdown&ShutdownSend != 0) {
		s.sentShutdown = true
		h := s.header(OpShutdown)
		h.Flags = ShutdownSend
		g.send(h, nil)
	}
}

// run drives the given streams until done reports true.
func (g *testGuest) run(streams map[connKey]*guestStream, timeout time.Duration, done func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			for k, s := range streams {
				g.t.Logf("stream %v: received %d, left to send %d, shutdown %d rst %v", k, s.received.n, len(s.out), s.gotShutdown, s.gotRST)
			}
			g.t.Fatalf("transfer not done within %v", timeout)
		}
		idle := !g.poll()
		inbox := g.inbox
		g.inbox = nil
		for _, p := range inbox {
			s := streams[connKey{local: p.h.SrcPort, peer: p.h.DstPort}]
			if s == nil {
				g.inbox = append(g.inbox, p) // the test's business
				continue
			}
			s.handle(g, p)
			idle = false
		}
		for _, s := range streams {
			if !s.gotRST {
				s.pushData(g)
			}
		}
		if idle {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

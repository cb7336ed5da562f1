package vsock

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// hostResult is what a host program saw of one connection.
type hostResult struct {
	port uint32 // from "OK <port>" (host-initiated only)
	got  [32]byte
	n    int
	err  error
}

// exchange writes send (then half-closes) while reading everything the
// peer sends until EOF, as a host program on a connection would.
func exchange(c *net.UnixConn, r io.Reader, send []byte, readDelay time.Duration) hostResult {
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(send)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	time.Sleep(readDelay) // a slow reader: the guest must stall, not the device
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err == nil {
		err = <-werr
	}
	return hostResult{got: [32]byte(h.Sum(nil)), n: int(n), err: err}
}

// hostConnect plays a host program: CONNECT to port, read the OK line, then
// exchange. The result arrives on the returned channel.
func hostConnect(path string, port uint32, send []byte, readDelay time.Duration) <-chan hostResult {
	res := make(chan hostResult, 1)
	go func() {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			res <- hostResult{err: err}
			return
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
			res <- hostResult{err: err}
			return
		}
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		var hostPort uint32
		if err == nil {
			_, err = fmt.Sscanf(line, "OK %d\n", &hostPort)
		}
		if err != nil {
			res <- hostResult{err: fmt.Errorf("handshake reply %q: %w", line, err)}
			return
		}
		r := exchange(c, br, send, readDelay)
		r.port = hostPort
		res <- r
	}()
	return res
}

func waitResult(t *testing.T, ch <-chan hostResult) hostResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("host side: %v", r.err)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("host side did not finish")
	}
	return hostResult{}
}

// acceptRequest answers the device's next REQUEST to guestPort and returns
// the guest end of the connection.
func (g *testGuest) acceptRequest(guestPort uint32, bufAlloc uint32, out []byte, maxPacket int) *guestStream {
	g.t.Helper()
	req := g.recv(func(h Header) bool { return h.Op == OpRequest && h.DstPort == guestPort })
	if req.h.SrcPort < firstEphemeralPort || req.h.BufAlloc != hostBufAlloc {
		g.t.Fatalf("REQUEST %+v", req.h)
	}
	s := &guestStream{t: g.t, guestPort: guestPort, hostPort: req.h.SrcPort, bufAlloc: bufAlloc,
		devBufAlloc: req.h.BufAlloc, devFwdCnt: req.h.FwdCnt, out: out, maxPacket: maxPacket}
	g.send(s.header(OpResponse), nil)
	return s
}

// connect opens a guest-initiated connection and returns its guest end.
func (g *testGuest) connect(guestPort, hostPort, bufAlloc uint32, out []byte, maxPacket int) *guestStream {
	g.t.Helper()
	s := &guestStream{t: g.t, guestPort: guestPort, hostPort: hostPort, bufAlloc: bufAlloc, out: out, maxPacket: maxPacket}
	g.send(s.header(OpRequest), nil)
	resp := g.recv(func(h Header) bool { return h.DstPort == guestPort && h.SrcPort == hostPort })
	if resp.h.Op != OpResponse {
		g.t.Fatalf("connect %d -> %d: got %v", guestPort, hostPort, resp.h.Op)
	}
	s.devBufAlloc, s.devFwdCnt = resp.h.BufAlloc, resp.h.FwdCnt
	return s
}

func streamsOf(ss ...*guestStream) map[connKey]*guestStream {
	m := map[connKey]*guestStream{}
	for _, s := range ss {
		m[connKey{local: s.hostPort, peer: s.guestPort}] = s
	}
	return m
}

func allReset(streams map[connKey]*guestStream) func() bool {
	return func() bool {
		for _, s := range streams {
			if !s.gotRST {
				return false
			}
		}
		return true
	}
}

// checkStream verifies a finished transfer from the guest's side.
func checkStream(t *testing.T, s *guestStream, fromHost []byte) {
	t.Helper()
	if s.received.n != len(fromHost) || s.received.digest() != sha256.Sum256(fromHost) {
		t.Errorf("port %d: guest received %d bytes, want %d (checksum mismatch)", s.guestPort, s.received.n, len(fromHost))
	}
	if s.gotShutdown&ShutdownSend == 0 {
		t.Errorf("port %d: no SHUTDOWN(SEND) after the host's EOF", s.guestPort)
	}
}

func checkHost(t *testing.T, r hostResult, fromGuest []byte) {
	t.Helper()
	if r.n != len(fromGuest) || r.got != sha256.Sum256(fromGuest) {
		t.Errorf("host received %d bytes, want %d (checksum mismatch)", r.n, len(fromGuest))
	}
}

func TestHostInitiatedTransfer(t *testing.T) {
	g := newTestGuest(t, 4096, 128)
	toGuest, toHost := randomBytes(t, 1<<20), randomBytes(t, 1<<20+17)
	res := hostConnect(g.path, 5000, toGuest, 0)
	s := g.acceptRequest(5000, 64<<10, toHost, 4000)
	streams := streamsOf(s)
	g.run(streams, 60*time.Second, allReset(streams))
	r := waitResult(t, res)
	if r.port != s.hostPort {
		t.Errorf("host was told port %d, the guest saw %d", r.port, s.hostPort)
	}
	checkStream(t, s, toGuest)
	checkHost(t, r, toHost)
	if g.irq.Count() == 0 {
		t.Error("no interrupt raised")
	}
	if len(g.inbox) != 0 {
		t.Errorf("stray packets %v", g.inbox)
	}
}

func TestGuestInitiatedTransfer(t *testing.T) {
	g := newTestGuest(t, 4096, 128)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: g.path + "_1234", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	toGuest, toHost := randomBytes(t, 1<<20-3), randomBytes(t, 1<<20)
	res := make(chan hostResult, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			res <- hostResult{err: err}
			return
		}
		defer c.Close()
		res <- exchange(c, c, toGuest, 0)
	}()
	s := g.connect(40000, 1234, 32<<10, toHost, 65536)
	streams := streamsOf(s)
	g.run(streams, 60*time.Second, allReset(streams))
	checkStream(t, s, toGuest)
	checkHost(t, waitResult(t, res), toHost)
}

func TestGuestConnectNoListener(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	g.send(Header{SrcPort: 40000, DstPort: 999, Op: OpRequest, BufAlloc: 4096}, nil)
	p := g.recv(func(Header) bool { return true })
	if p.h.Op != OpRST || p.h.SrcPort != 999 || p.h.DstPort != 40000 {
		t.Fatalf("got %+v, want RST", p.h)
	}
}

// TestConcurrentStreams runs 16 host-initiated and 16 guest-initiated
// connections at once. Each carries its own random blob out and back (the
// far end echoes), so any mix-up between streams or lost byte shows in the
// checksums.
func TestConcurrentStreams(t *testing.T) {
	const perKind = 16
	const size = 256 << 10
	g := newTestGuest(t, 4096, 200)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: g.path + "_1234", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // the host listener echoes every connection
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					c.CloseWrite()
					io.Copy(io.Discard, c)
				}
			}()
		}
	}()

	blobs := make([][]byte, 2*perKind)
	for i := range blobs {
		blobs[i] = randomBytes(t, size+i)
	}
	hostRes := make([]<-chan hostResult, perKind)
	for i := range perKind {
		hostRes[i] = hostConnect(g.path, 5000, blobs[i], 0)
	}
	var streams []*guestStream
	for range perKind {
		s := g.acceptRequest(5000, 64<<10, nil, 4096)
		s.echo = true
		streams = append(streams, s)
	}
	for i := range perKind {
		streams = append(streams, g.connect(uint32(40000+i), 1234, 64<<10, blobs[perKind+i], 4096))
	}
	all := streamsOf(streams...)
	if len(all) != 2*perKind {
		t.Fatalf("%d distinct connections, want %d", len(all), 2*perKind)
	}
	g.run(all, 120*time.Second, allReset(all))
	for i := range perKind {
		r := waitResult(t, hostRes[i])
		if r.n != len(blobs[i]) || r.got != sha256.Sum256(blobs[i]) {
			t.Errorf("host connection %d: echo of %d bytes came back as %d (checksum mismatch)", i, len(blobs[i]), r.n)
		}
		s := streams[perKind+i]
		if s.received.n != len(blobs[perKind+i]) || s.received.digest() != sha256.Sum256(blobs[perKind+i]) {
			t.Errorf("guest connection %d: echo of %d bytes came back as %d (checksum mismatch)", i, len(blobs[perKind+i]), s.received.n)
		}
	}
}

// TestLargeTransferHonoursCredit moves 16 MiB each way on one connection
// with a 64 KiB guest buffer (every RW is checked against it by the test
// guest) behind a host reader that starts late, so both directions run out
// of credit and must resume on CREDIT_UPDATE.
func TestLargeTransferHonoursCredit(t *testing.T) {
	if testing.Short() {
		t.Skip("16 MiB transfer")
	}
	g := newTestGuest(t, HeaderSize+64<<10, 12)
	toGuest, toHost := randomBytes(t, 16<<20), randomBytes(t, 16<<20)
	res := hostConnect(g.path, 7000, toGuest, 300*time.Millisecond)
	s := g.acceptRequest(7000, 64<<10, toHost, 64<<10)
	// Hold all credit for a while: the device must stop at exactly the
	// guest's 64 KiB buffer although the host has 16 MiB to send.
	time.Sleep(200 * time.Millisecond)
	g.poll()
	held := 0
	for _, p := range g.inbox {
		if p.h.Op == OpRW {
			held += len(p.payload)
		}
	}
	if held != 64<<10 {
		t.Fatalf("device sent %d bytes into a 64 KiB buffer nobody acknowledged", held)
	}
	streams := streamsOf(s)
	g.run(streams, 120*time.Second, allReset(streams))
	checkStream(t, s, toGuest)
	checkHost(t, waitResult(t, res), toHost)
	if s.creditStalls == 0 {
		t.Error("the guest never ran out of the device's credit: the test did not exercise flow control")
	}
}

func TestMalformedGuestPackets(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	ok := Header{SrcCID: DefaultCID, DstCID: HostCID, SrcPort: 1, DstPort: 2, Type: TypeStream, Op: OpRW}

	// Dropped silently: too short to be a header, not from the guest's CID,
	// no readable buffer at all.
	g.sendRaw(ok.Bytes()[:HeaderSize-1])
	wrongCID := ok
	wrongCID.SrcCID = 99
	g.sendRaw(wrongCID.Bytes())
	g.tx().AddChain(nil, []uint32{64})
	g.drv.Notify(txQueue)
	g.quiet(50 * time.Millisecond)

	// Answered with RST: wrong socket type, payload longer than the chain,
	// payload over MaxPayload, unknown op.
	seq := ok
	seq.Type = 2
	g.sendRaw(seq.Bytes())
	truncated := ok
	truncated.Len = 100
	g.sendRaw(truncated.Bytes(), make([]byte, 99))
	huge := ok
	huge.Len = MaxPayload + 1
	g.sendRaw(huge.Bytes(), make([]byte, MaxPayload+1))
	unknown := ok
	unknown.Op = 42
	g.sendRaw(unknown.Bytes())
	for _, want := range []uint16{2, TypeStream, TypeStream, TypeStream} {
		p := g.recv(func(Header) bool { return true })
		if p.h.Op != OpRST || p.h.Type != want || p.h.DstPort != 1 || p.h.SrcPort != 2 {
			t.Fatalf("got %+v, want RST of type %d", p.h, want)
		}
	}
	g.quiet(50 * time.Millisecond)

	// A header split across descriptors is fine.
	b := ok.Bytes()
	b[30] = byte(OpCreditRequest)
	g.sendRaw(b[:10], b[10:])
	if p := g.recv(func(Header) bool { return true }); p.h.Op != OpRST {
		t.Fatalf("split header: got %v, want RST for the unknown connection", p.h.Op)
	}
}

func TestHostConnectRefusedByGuest(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	c, err := net.Dial("unix", g.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 80\n")
	req := g.recv(isOp(OpRequest))
	g.send(Header{SrcPort: 80, DstPort: req.h.SrcPort, Op: OpRST}, nil)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("host read %d bytes, %v; want EOF without an OK line", n, err)
	}
}

func TestHostConnectGuestSilent(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	c, err := net.Dial("unix", g.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 80\n")
	req := g.recv(isOp(OpRequest))
	start := time.Now()
	rst := g.recv(isOp(OpRST))
	if rst.h.SrcPort != req.h.SrcPort || time.Since(start) < connectTimeout/2 {
		t.Fatalf("RST %+v after %v", rst.h, time.Since(start))
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("host read: %v, want EOF", err)
	}
}

func TestHostConnectBadHandshake(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	for _, line := range []string{"HELLO\n", "CONNECT x\n", strings.Repeat("A", 100)} {
		c, err := net.Dial("unix", g.path)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, line)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// EOF, or a reset when the device closed with bytes unread.
		if _, err := c.Read(make([]byte, 16)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%q: host read %v, want the connection closed", line, err)
		}
		c.Close()
	}
	g.quiet(20 * time.Millisecond)
}

// established opens a host-initiated connection and returns the host socket
// (past the OK line) and the guest end.
func (g *testGuest) established(port uint32) (*net.UnixConn, *guestStream) {
	g.t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: g.path, Net: "unix"})
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %d\n", port)
	s := g.acceptRequest(port, 4096, nil, 4096)
	want := fmt.Sprintf("OK %d\n", s.hostPort)
	got := make([]byte, len(want))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		g.t.Fatalf("handshake: %q, %v", got, err)
	}
	c.SetReadDeadline(time.Time{})
	return c, s
}

func TestResetClosesHostConnections(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	c, _ := g.established(80)
	g.drv.Reset()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("host read after device reset: %v, want EOF", err)
	}
	// The listener survives a reset: host programs wait for the driver.
	c2, err := net.Dial("unix", g.path)
	if err != nil {
		t.Fatalf("listener gone after reset: %v", err)
	}
	c2.Close()
}

func TestTransportReset(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	c, _ := g.established(80)
	if err := g.dev.SendTransportReset(); err != nil {
		t.Fatal(err)
	}
	ev := g.ev().WaitUsed(1, 5*time.Second)
	if ev[0].Len != 4 || binary.LittleEndian.Uint32(ev[0].Data) != eventTransportReset {
		t.Fatalf("event %+v, want TRANSPORT_RESET", ev[0])
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("host read after transport reset: %v, want EOF", err)
	}
	g.quiet(20 * time.Millisecond) // connections dropped without RSTs

	g.drv.Reset()
	if err := g.dev.SendTransportReset(); !errors.Is(err, ErrNotActive) {
		t.Fatalf("transport reset of an inactive device: %v", err)
	}
}

func TestRestoreAnnouncesTransportReset(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	st := g.dev.State()
	if st.CID != DefaultCID {
		t.Fatalf("state %+v", st)
	}
	if err := g.dev.Restore(st); err == nil {
		t.Fatal("restore accepted while active")
	}
	g.drv.Reset()
	if err := g.dev.Restore(State{CID: 1}); !errors.Is(err, ErrInvalidCID) {
		t.Fatalf("restore of CID 1: %v", err)
	}
	if err := g.dev.Restore(State{CID: 7}); err != nil {
		t.Fatal(err)
	}
	drv := virtiotest.Init(t, g.drv.Transport, g.mem, virtiotest.Options{})
	if cid := binary.LittleEndian.Uint64(drv.ReadConfig(0, 8)); cid != 7 {
		t.Fatalf("restored CID %d, want 7", cid)
	}
	drv.Queues[eventQueue].AddChain(nil, []uint32{8})
	drv.Notify(eventQueue)
	ev := drv.Queues[eventQueue].WaitUsed(1, 5*time.Second)
	if ev[0].Len != 4 || binary.LittleEndian.Uint32(ev[0].Data) != eventTransportReset {
		t.Fatalf("event %+v, want TRANSPORT_RESET", ev[0])
	}
}

func TestConfigAndIdentity(t *testing.T) {
	g := newTestGuest(t, 4096, 1)
	if id := g.drv.Read32(virtiotest.RegDeviceID); id != uint32(virtio.IDVsock) {
		t.Fatalf("device ID %d", id)
	}
	if g.drv.Features&FeatureStream == 0 {
		t.Fatal("VIRTIO_VSOCK_F_STREAM not offered")
	}
	if cid := binary.LittleEndian.Uint64(g.drv.ReadConfig(0, 8)); cid != DefaultCID {
		t.Fatalf("guest_cid %d", cid)
	}
	if lo := binary.LittleEndian.Uint32(g.drv.ReadConfig(0, 4)); lo != DefaultCID {
		t.Fatalf("guest_cid low word %d", lo)
	}
	if hi := g.drv.ReadConfig(4, 4); binary.LittleEndian.Uint32(hi) != 0 {
		t.Fatalf("guest_cid high word % x", hi)
	}
	g.drv.WriteConfig(0, []byte{9, 9, 9, 9})
	if cid := binary.LittleEndian.Uint64(g.drv.ReadConfig(0, 8)); cid != DefaultCID {
		t.Fatal("config space is writable")
	}
	if past := g.drv.ReadConfig(8, 8); binary.LittleEndian.Uint64(past) != 0 {
		t.Fatal("bytes past the config space are not zero")
	}
	// Offsets near 2^64 must not wrap into the config space.
	var b [8]byte
	g.dev.ReadConfig(^uint64(0)-3, b[:])
	if b != [8]byte{} {
		t.Fatalf("wrapped read % x", b)
	}
}

func TestNewErrors(t *testing.T) {
	dir := socketDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "live.sock")
	d, err := New(Config{UDSPath: live})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	tests := []struct {
		cfg  Config
		want error
	}{
		{Config{}, ErrNoSocketPath},
		{Config{CID: 2, UDSPath: filepath.Join(dir, "a")}, ErrInvalidCID},
		{Config{CID: 0xffffffff, UDSPath: filepath.Join(dir, "a")}, ErrInvalidCID},
		{Config{CID: 1 << 32, UDSPath: filepath.Join(dir, "a")}, ErrInvalidCID},
		{Config{UDSPath: filepath.Join(dir, "missing", "v.sock")}, ErrSocketDirMissing},
		{Config{UDSPath: filepath.Join(file, "v.sock")}, ErrSocketDirMissing},
		{Config{UDSPath: "/" + strings.Repeat("x", 120)}, ErrSocketPathTooLong},
		{Config{UDSPath: live}, ErrSocketInUse},
		{Config{UDSPath: file}, ErrSocketPathOccupied},
	}
	for _, tt := range tests {
		if d, err := New(tt.cfg); !errors.Is(err, tt.want) {
			if d != nil {
				d.Close()
			}
			t.Errorf("New(%+v) = %v, want %v", tt.cfg, err, tt.want)
		}
	}
}

func TestStaleSocketReplacedAndRemovedOnClose(t *testing.T) {
	path := filepath.Join(socketDir(t), "v.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves the socket file behind, as a crashed VMM would
	d, err := New(Config{CID: 42, UDSPath: path})
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	if d.CID() != 42 || d.UDSPath() != path {
		t.Fatalf("CID %d path %s", d.CID(), d.UDSPath())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left after Close: %v", err)
	}
	if err := d.Activate(virtio.Env{}); err == nil {
		t.Fatal("activated a closed device")
	}
}

// TestCloseLeavesNoGoroutines checks that Reset and Close wait for every
// goroutine the device started: worker, socket readers and writers,
// dialler, listener and handshakes.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	g := newTestGuest(t, 4096, 16)
	g.established(80)
	g.established(81)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: g.path + "_1234", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.connect(40000, 1234, 4096, nil, 4096)
	idle, err := net.Dial("unix", g.path) // a host program still in handshake
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(10 * time.Millisecond)

	g.drv.Reset()
	if err := g.dev.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// A packet whose payload is spread over several buffers, the first shared
// with the header, reaches the host whole and in order (the gather path;
// Linux puts each payload in one buffer, which the device passes on without
// a copy).
func TestGuestPayloadAcrossBuffers(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: g.path + "_1234", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	base := Header{SrcCID: DefaultCID, DstCID: HostCID, SrcPort: 40000, DstPort: 1234, Type: TypeStream, BufAlloc: 65536}
	req := base
	req.Op = OpRequest
	g.send(req, nil)
	g.recv(func(h Header) bool { return h.Op == OpResponse })
	payload := []byte("a payload in three guest buffers")
	rw := base
	rw.Op, rw.Len = OpRW, uint32(len(payload))
	g.sendRaw(append(rw.Bytes(), payload[:3]...), payload[3:10], payload[10:])
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("host read: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("host got %q, want %q", got, payload)
	}
}

// TestHostConnectsWaitForTheResetToBeHandled: after a restore, a host
// program's connection is not offered to the guest until the guest has
// handled the TRANSPORT_RESET (it refills its event queue afterwards):
// the guest's reset of its sockets would drop a connection made sooner.
func TestHostConnectsWaitForTheResetToBeHandled(t *testing.T) {
	g := newTestGuest(t, 4096, 16)
	g.drv.Reset()
	if err := g.dev.Restore(State{CID: DefaultCID}); err != nil {
		t.Fatal(err)
	}
	g.drv = virtiotest.Init(t, g.drv.Transport, g.mem, virtiotest.Options{})
	for range 16 {
		g.rx().AddChain(nil, []uint32{4096})
	}
	g.drv.Notify(rxQueue)
	c, err := net.Dial("unix", g.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 80\n")
	g.quiet(300 * time.Millisecond) // the reset is owed: nothing offered

	g.ev().AddChain(nil, []uint32{4})
	g.drv.Notify(eventQueue)
	if ev := g.ev().WaitUsed(1, 5*time.Second); binary.LittleEndian.Uint32(ev[0].Data) != eventTransportReset {
		t.Fatalf("event %+v", ev[0])
	}
	g.quiet(300 * time.Millisecond) // delivered, not yet handled

	g.ev().AddChain(nil, []uint32{4}) // the driver refills: handled
	start := time.Now()
	req := g.recv(isOp(OpRequest))
	if req.h.DstPort != 80 || time.Since(start) > resetGateMax/2 {
		t.Fatalf("request %+v after %v", req.h, time.Since(start))
	}
}

package vsock

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// These tests drive the protocol state machine (muxer and conn) directly,
// without guest memory or sockets: guest packets go in as Headers, packets
// for the guest come out of next, and the host side is a recording fake.

const testCID = 3

type fakeStream struct {
	sent       []byte
	closeWrite bool
	permits    int
	closed     bool
}

func (s *fakeStream) Send(p []byte) { s.sent = append(s.sent, p...) }
func (s *fakeStream) CloseWrite()   { s.closeWrite = true }
func (s *fakeStream) PermitRead()   { s.permits++ }
func (s *fakeStream) Close()        { s.closed = true }

type dialCall struct {
	c         *conn
	port      uint32
	cancelled bool
}

type fakeDialer struct{ calls []*dialCall }

func (d *fakeDialer) Dial(c *conn, port uint32) func() {
	call := &dialCall{c: c, port: port}
	d.calls = append(d.calls, call)
	return func() { call.cancelled = true }
}

// opens returns a dialDone open function attaching s.
func opens(s hostStream) func(*conn) hostStream {
	return func(*conn) hostStream { return s }
}

type muxTest struct {
	t   *testing.T
	m   *muxer
	d   *fakeDialer
	now time.Time
}

func newMuxTest(t *testing.T) *muxTest {
	d := &fakeDialer{}
	return &muxTest{t: t, m: newMuxer(testCID, d), d: d, now: time.Unix(1000, 0)}
}

type outPacket struct {
	h       Header
	payload []byte
}

// drain collects every packet the muxer has for the guest, with rx buffers
// that hold maxPayload bytes of payload.
func (mt *muxTest) drain(maxPayload int) []outPacket {
	mt.t.Helper()
	var out []outPacket
	for mt.m.hasOutput() {
		h, p, ok := mt.m.next(maxPayload)
		if !ok {
			mt.t.Fatal("hasOutput but next produced nothing")
		}
		if h.SrcCID != HostCID || h.DstCID != testCID || h.Type == 0 {
			mt.t.Fatalf("bad addressing in %+v", h)
		}
		if int(h.Len) != len(p) {
			mt.t.Fatalf("header len %d, payload %d", h.Len, len(p))
		}
		out = append(out, outPacket{h, append([]byte(nil), p...)})
		if len(out) > 10000 {
			mt.t.Fatal("muxer output does not end")
		}
	}
	return out
}

// expect drains and checks the sequence of operations.
func (mt *muxTest) expect(maxPayload int, ops ...Op) []outPacket {
	mt.t.Helper()
	out := mt.drain(maxPayload)
	var got []Op
	for _, p := range out {
		got = append(got, p.h.Op)
	}
	if fmt.Sprint(got) != fmt.Sprint(ops) {
		mt.t.Fatalf("guest got %v, want %v", got, ops)
	}
	return out
}

// guest sends a packet from guest port gport to host port hport.
func (mt *muxTest) guest(op Op, gport, hport uint32, mod func(*Header), payload []byte) {
	mt.t.Helper()
	h := Header{SrcCID: testCID, DstCID: HostCID, SrcPort: gport, DstPort: hport, Type: TypeStream, Op: op,
		Len: uint32(len(payload)), BufAlloc: 1 << 20}
	if mod != nil {
		mod(&h)
	}
	if err := h.Validate(testCID, uint64(len(payload))); err != nil {
		mt.t.Fatalf("test sends invalid packet: %v", err)
	}
	mt.m.guestPacket(h, payload, mt.now)
}

// hostConnect opens a host-initiated connection to guest port and returns
// its stream and the host port from the REQUEST.
func (mt *muxTest) hostConnect(port uint32) (*fakeStream, uint32) {
	mt.t.Helper()
	s := &fakeStream{}
	if !mt.m.hostConnect(port, mt.now, func(*conn) hostStream { return s }) {
		mt.t.Fatal("hostConnect refused")
	}
	out := mt.expect(MaxPayload, OpRequest)
	req := out[0].h
	if req.DstPort != port || req.SrcPort < firstEphemeralPort || req.BufAlloc != hostBufAlloc || req.FwdCnt != 0 {
		t := mt.t
		t.Fatalf("bad REQUEST %+v", req)
	}
	return s, req.SrcPort
}

// established opens a host-initiated connection the guest accepted with
// the given buffer; it returns the stream and the host port.
func (mt *muxTest) established(gport, bufAlloc uint32) (*fakeStream, uint32) {
	mt.t.Helper()
	s, hport := mt.hostConnect(gport)
	mt.guest(OpResponse, gport, hport, func(h *Header) { h.BufAlloc = bufAlloc }, nil)
	line := fmt.Sprintf("OK %d\n", hport)
	if string(s.sent) != line {
		mt.t.Fatalf("host got %q, want %q", s.sent, line)
	}
	mt.m.hostWritten(mt.conn(gport, hport), len(line))
	s.sent = nil
	mt.expect(MaxPayload) // nothing
	return s, hport
}

func (mt *muxTest) conn(gport, hport uint32) *conn {
	return mt.m.conns[connKey{local: hport, peer: gport}]
}

func TestHostInitiatedHandshake(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.hostConnect(5000)
	if s.permits != 0 {
		t.Fatal("reading the host before the guest accepted")
	}
	mt.guest(OpResponse, 5000, hport, nil, nil)
	if want := fmt.Sprintf("OK %d\n", hport); string(s.sent) != want {
		t.Fatalf("host got %q, want %q", s.sent, want)
	}
	if s.permits != 1 {
		t.Fatalf("%d read permits after RESPONSE, want 1", s.permits)
	}
	c := mt.conn(5000, hport)
	mt.m.hostWritten(c, len(s.sent))
	if c.fwdCnt != 0 || !c.flushed() {
		t.Fatalf("the OK line counted as stream data: fwd_cnt %d", c.fwdCnt)
	}
	mt.expect(MaxPayload)
}

func TestHostInitiatedRefusedByGuest(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.hostConnect(5000)
	mt.guest(OpRST, 5000, hport, nil, nil)
	mt.expect(MaxPayload) // an RST is not answered
	if !s.closed || len(mt.m.conns) != 0 || len(mt.m.ephemeral) != 0 {
		t.Fatalf("closed %v, %d conns, %d ports after RST", s.closed, len(mt.m.conns), len(mt.m.ephemeral))
	}
	if len(s.sent) != 0 {
		t.Fatalf("host got %q from a refused connection", s.sent)
	}
}

func TestHostInitiatedTimeout(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.hostConnect(5000)
	if d, ok := mt.m.nextDeadline(); !ok || d != mt.now.Add(connectTimeout) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if ports := mt.m.expire(mt.now.Add(connectTimeout - time.Millisecond)); ports != nil {
		t.Fatalf("unanswered before the deadline: %v", ports)
	}
	mt.expect(MaxPayload)
	if ports := mt.m.expire(mt.now.Add(connectTimeout)); len(ports) != 1 || ports[0] != 5000 {
		t.Fatalf("unanswered at the deadline: %v, want [5000]", ports)
	}
	out := mt.expect(MaxPayload, OpRST)
	if out[0].h.SrcPort != hport || out[0].h.DstPort != 5000 || !s.closed {
		t.Fatalf("RST %+v, host closed %v", out[0].h, s.closed)
	}
	if _, ok := mt.m.nextDeadline(); ok {
		t.Fatal("deadline left after the connection died")
	}
}

func TestResponseBeforeRequestIsReset(t *testing.T) {
	mt := newMuxTest(t)
	s := &fakeStream{}
	mt.m.hostConnect(5000, mt.now, func(*conn) hostStream { return s })
	// The guest guesses the port before the REQUEST left the device.
	mt.guest(OpResponse, 5000, firstEphemeralPort, nil, nil)
	mt.expect(MaxPayload, OpRST)
	if !s.closed || len(s.sent) != 0 {
		t.Fatal("connection established without a REQUEST")
	}
}

func TestGuestInitiated(t *testing.T) {
	mt := newMuxTest(t)
	mt.guest(OpRequest, 40000, 1234, func(h *Header) { h.BufAlloc = 4096 }, nil)
	if len(mt.d.calls) != 1 || mt.d.calls[0].port != 1234 {
		t.Fatalf("dials %+v", mt.d.calls)
	}
	mt.expect(MaxPayload) // nothing until the dial completes
	s := &fakeStream{}
	if !mt.m.dialDone(mt.d.calls[0].c, nil, opens(s)) {
		t.Fatal("dial result not used")
	}
	out := mt.expect(MaxPayload, OpResponse)
	if h := out[0].h; h.SrcPort != 1234 || h.DstPort != 40000 || h.BufAlloc != hostBufAlloc {
		t.Fatalf("RESPONSE %+v", h)
	}
	if s.permits != 1 {
		t.Fatal("no read permit after the connection was established")
	}
	// Data both ways.
	mt.guest(OpRW, 40000, 1234, nil, []byte("ping"))
	if string(s.sent) != "ping" {
		t.Fatalf("host got %q", s.sent)
	}
	mt.m.hostData(mt.conn(40000, 1234), []byte("pong"))
	out = mt.expect(MaxPayload, OpRW)
	if string(out[0].payload) != "pong" {
		t.Fatalf("guest got %q", out[0].payload)
	}
}

func TestGuestInitiatedDialFails(t *testing.T) {
	mt := newMuxTest(t)
	mt.guest(OpRequest, 40000, 1234, nil, nil)
	mt.m.dialDone(mt.d.calls[0].c, errors.New("connection refused"), opens(nil))
	out := mt.expect(MaxPayload, OpRST)
	if h := out[0].h; h.SrcPort != 1234 || h.DstPort != 40000 {
		t.Fatalf("RST %+v", h)
	}
	if len(mt.m.conns) != 0 {
		t.Fatal("failed connection kept")
	}
}

func TestGuestCancelsWhileDialling(t *testing.T) {
	mt := newMuxTest(t)
	mt.guest(OpRequest, 40000, 1234, nil, nil)
	mt.guest(OpRST, 40000, 1234, nil, nil)
	if !mt.d.calls[0].cancelled {
		t.Fatal("dial of a reset connection not cancelled")
	}
	if got := mt.m.slotsUsed(); got != 1 {
		t.Fatalf("%d slots used while the cancelled dial is in flight, want 1", got)
	}
	if mt.m.dialDone(mt.d.calls[0].c, nil, func(*conn) hostStream {
		t.Fatal("stream opened for a reset connection")
		return nil
	}) {
		t.Fatal("late dial result used")
	}
	mt.expect(MaxPayload)
	if got := mt.m.slotsUsed(); got != 0 {
		t.Fatalf("%d slots used after the dial reported, want 0", got)
	}
}

// TestDialsInFlightCountAgainstLimit: a guest that resets each connection
// right after its REQUEST cannot have more than maxConns dials in flight;
// slots come back as the dials report.
func TestDialsInFlightCountAgainstLimit(t *testing.T) {
	mt := newMuxTest(t)
	for i := range maxConns {
		mt.guest(OpRequest, uint32(i), 1234, nil, nil)
		mt.guest(OpRST, uint32(i), 1234, nil, nil)
	}
	if len(mt.m.conns) != 0 || len(mt.d.calls) != maxConns {
		t.Fatalf("%d connections, %d dials", len(mt.m.conns), len(mt.d.calls))
	}
	mt.guest(OpRequest, 9999, 1234, nil, nil)
	mt.expect(MaxPayload, OpRST)
	if len(mt.d.calls) != maxConns {
		t.Fatal("dialled past the limit")
	}
	if mt.m.hostConnect(5, mt.now, opens(&fakeStream{})) {
		t.Fatal("host connection accepted with every slot held by a dial")
	}
	// One dial reports: its slot is free again.
	mt.m.dialDone(mt.d.calls[0].c, nil, opens(&fakeStream{}))
	mt.guest(OpRequest, 9999, 1234, nil, nil)
	if len(mt.d.calls) != maxConns+1 {
		t.Fatal("freed slot not reused")
	}
	// A dial that times out removes its connection; the slot is held the
	// same way until the dial reports.
	mt.now = mt.now.Add(connectTimeout)
	mt.m.expire(mt.now)
	mt.expect(MaxPayload, OpRST)
	if !mt.d.calls[maxConns].cancelled || mt.m.slotsUsed() != maxConns {
		t.Fatalf("timed-out dial: cancelled %v, %d slots used", mt.d.calls[maxConns].cancelled, mt.m.slotsUsed())
	}
	for _, call := range mt.d.calls[1:] {
		mt.m.dialDone(call.c, errDialCancelled, opens(nil))
	}
	if mt.m.slotsUsed() != 0 {
		t.Fatalf("%d slots used after every dial reported", mt.m.slotsUsed())
	}
	mt.expect(MaxPayload) // no RSTs for connections the guest reset itself
	// A second report for the same dial changes nothing.
	mt.m.dialDone(mt.d.calls[0].c, nil, opens(&fakeStream{}))
	if mt.m.slotsUsed() != 0 {
		t.Fatal("duplicate dial report miscounted")
	}
}

func TestUnknownConnectionGetsRST(t *testing.T) {
	mt := newMuxTest(t)
	for _, op := range []Op{OpRW, OpResponse, OpShutdown, OpCreditUpdate, OpCreditRequest} {
		mt.guest(op, 7, 8, nil, nil)
		out := mt.expect(MaxPayload, OpRST)
		if h := out[0].h; h.SrcPort != 8 || h.DstPort != 7 {
			t.Fatalf("%v: RST %+v", op, h)
		}
	}
	mt.guest(OpRST, 7, 8, nil, nil)
	mt.expect(MaxPayload)
}

func TestRefuseInvalidPackets(t *testing.T) {
	mt := newMuxTest(t)
	bad := Header{SrcCID: testCID, DstCID: HostCID, SrcPort: 7, DstPort: 8, Type: 2, Op: OpRequest}
	mt.m.refuse(bad, bad.Validate(testCID, 0))
	out := mt.expect(MaxPayload, OpRST)
	if out[0].h.Type != 2 || out[0].h.DstPort != 7 {
		t.Fatalf("RST %+v", out[0].h)
	}
	wrongCID := bad
	wrongCID.SrcCID = 9
	mt.m.refuse(wrongCID, wrongCID.Validate(testCID, 0))
	mt.expect(MaxPayload) // not from our guest: dropped
}

func TestCreditHostToGuest(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 100)
	c := mt.conn(5000, hport)
	data := bytes.Repeat([]byte("0123456789"), 30)
	mt.m.hostData(c, data)
	out := mt.expect(MaxPayload, OpRW)
	if !bytes.Equal(out[0].payload, data[:100]) {
		t.Fatalf("first packet %d bytes, want the 100 of credit", len(out[0].payload))
	}
	// No credit left: nothing more until the guest consumes.
	mt.guest(OpCreditUpdate, 5000, hport, func(h *Header) { h.BufAlloc, h.FwdCnt = 100, 50 }, nil)
	out = mt.expect(MaxPayload, OpRW)
	if !bytes.Equal(out[0].payload, data[100:150]) {
		t.Fatalf("after fwd_cnt 50 got %d bytes, want 50", len(out[0].payload))
	}
	// A bigger buffer, and rx buffers smaller than the data.
	mt.guest(OpCreditUpdate, 5000, hport, func(h *Header) { h.BufAlloc, h.FwdCnt = 1000, 150 }, nil)
	out = mt.expect(64, OpRW, OpRW, OpRW)
	got := append(append(out[0].payload, out[1].payload...), out[2].payload...)
	if !bytes.Equal(got, data[150:]) || len(out[0].payload) != 64 {
		t.Fatalf("rest arrived as %d+%d+%d bytes", len(out[0].payload), len(out[1].payload), len(out[2].payload))
	}
	if s.closed {
		t.Fatal("stream closed")
	}
}

func TestLyingGuestFwdCntStallsOnlyItself(t *testing.T) {
	mt := newMuxTest(t)
	_, hport := mt.established(5000, 100)
	c := mt.conn(5000, hport)
	mt.m.hostData(c, make([]byte, 50))
	mt.expect(MaxPayload, OpRW)
	// fwd_cnt ahead of what was sent would read as negative bytes in flight.
	mt.guest(OpCreditUpdate, 5000, hport, func(h *Header) { h.BufAlloc, h.FwdCnt = 100, 1000 }, nil)
	mt.m.hostData(c, make([]byte, 50))
	mt.expect(MaxPayload)
	if c.peerCredit() != 0 {
		t.Fatalf("credit %d from a bogus fwd_cnt", c.peerCredit())
	}
}

func TestCreditGuestToHost(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 1<<20)
	c := mt.conn(5000, hport)
	chunk := make([]byte, MaxPayload)
	for sent := 0; sent < hostBufAlloc; sent += len(chunk) {
		mt.guest(OpRW, 5000, hport, nil, chunk)
	}
	if len(s.sent) != hostBufAlloc || s.closed {
		t.Fatalf("host got %d bytes of %d, closed %v", len(s.sent), hostBufAlloc, s.closed)
	}
	// The host wrote part of it: the guest learns once enough is consumed.
	mt.m.hostWritten(c, creditUpdateThreshold-1)
	mt.expect(MaxPayload)
	mt.m.hostWritten(c, 1)
	out := mt.expect(MaxPayload, OpCreditUpdate)
	if out[0].h.FwdCnt != creditUpdateThreshold || out[0].h.BufAlloc != hostBufAlloc {
		t.Fatalf("CREDIT_UPDATE %+v", out[0].h)
	}
	// Exactly the freed credit is accepted; one byte more is a violation.
	mt.guest(OpRW, 5000, hport, nil, make([]byte, creditUpdateThreshold))
	if s.closed {
		t.Fatal("reset within credit")
	}
	mt.guest(OpRW, 5000, hport, nil, []byte{1})
	mt.expect(MaxPayload, OpRST)
	if !s.closed {
		t.Fatal("host socket open after a credit violation")
	}
}

func TestCreditRequest(t *testing.T) {
	mt := newMuxTest(t)
	_, hport := mt.established(5000, 4096)
	c := mt.conn(5000, hport)
	mt.guest(OpRW, 5000, hport, nil, []byte("abc"))
	mt.m.hostWritten(c, 3)
	for range 5 { // repeated requests are answered once
		mt.guest(OpCreditRequest, 5000, hport, nil, nil)
	}
	out := mt.expect(MaxPayload, OpCreditUpdate)
	if out[0].h.FwdCnt != 3 {
		t.Fatalf("CREDIT_UPDATE fwd_cnt %d, want 3", out[0].h.FwdCnt)
	}
}

func TestCreditUpdateRidesOnData(t *testing.T) {
	mt := newMuxTest(t)
	_, hport := mt.established(5000, 4096)
	c := mt.conn(5000, hport)
	mt.guest(OpCreditRequest, 5000, hport, nil, nil)
	mt.m.hostData(c, []byte("x"))
	// The RW header carries the credit, so no separate update follows.
	mt.expect(MaxPayload, OpRW)
}

func TestHalfCloseBothWays(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	c := mt.conn(5000, hport)
	mt.guest(OpRW, 5000, hport, nil, []byte("request"))
	mt.guest(OpShutdown, 5000, hport, func(h *Header) { h.Flags = ShutdownSend }, nil)
	if !s.closeWrite {
		t.Fatal("guest SHUTDOWN(SEND) did not half-close the host socket")
	}
	// The guest still reads: the host answers, then ends its side.
	mt.m.hostData(c, []byte("response"))
	mt.m.hostEOF(c)
	out := mt.expect(MaxPayload, OpRW, OpShutdown)
	if out[1].h.Flags != ShutdownSend {
		t.Fatalf("SHUTDOWN flags %d", out[1].h.Flags)
	}
	// Both sides are done, but the host has not taken the request yet.
	if s.closed {
		t.Fatal("closed before the guest's data reached the host")
	}
	mt.m.hostWritten(c, len("request"))
	out = mt.expect(MaxPayload, OpRST)
	if !s.closed || len(mt.m.conns) != 0 || out[0].h.SrcPort != hport {
		t.Fatalf("not finished: closed %v conns %d", s.closed, len(mt.m.conns))
	}
}

func TestHostEOFWaitsForPendingData(t *testing.T) {
	mt := newMuxTest(t)
	_, hport := mt.established(5000, 10)
	c := mt.conn(5000, hport)
	mt.m.hostData(c, make([]byte, 15))
	mt.m.hostEOF(c)
	mt.expect(MaxPayload, OpRW) // 10 bytes; SHUTDOWN must not overtake the other 5
	mt.guest(OpCreditUpdate, 5000, hport, func(h *Header) { h.BufAlloc, h.FwdCnt = 10, 10 }, nil)
	out := mt.expect(MaxPayload, OpRW, OpShutdown)
	if len(out[0].payload) != 5 {
		t.Fatalf("last packet %d bytes", len(out[0].payload))
	}
}

func TestShutdownBothFlushesThenResets(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	c := mt.conn(5000, hport)
	mt.guest(OpRW, 5000, hport, nil, []byte("last words"))
	mt.m.hostData(c, []byte("unread"))
	mt.guest(OpShutdown, 5000, hport, func(h *Header) { h.Flags = ShutdownBoth }, nil)
	mt.expect(MaxPayload) // nothing for a guest that reads no more
	if s.closed || c.state != stateClosing {
		t.Fatalf("state %v closed %v, want closing and open", c.state, s.closed)
	}
	// The last of the guest's data reaches the host: now the RST.
	mt.m.hostWritten(c, len("last words"))
	mt.expect(MaxPayload, OpRST)
	if !s.closed {
		t.Fatal("host socket left open")
	}
}

func TestShutdownBothTimesOut(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	mt.guest(OpRW, 5000, hport, nil, []byte("never written"))
	mt.guest(OpShutdown, 5000, hport, func(h *Header) { h.Flags = ShutdownBoth }, nil)
	mt.m.expire(mt.now.Add(closeTimeout))
	mt.expect(MaxPayload, OpRST)
	if !s.closed {
		t.Fatal("stuck host socket not closed")
	}
}

func TestShutdownBothWhenFlushedResetsAtOnce(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	mt.guest(OpShutdown, 5000, hport, func(h *Header) { h.Flags = ShutdownBoth }, nil)
	mt.expect(MaxPayload, OpRST)
	if !s.closed {
		t.Fatal("host socket left open")
	}
}

func TestDataAfterShutdownSendIsReset(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	mt.guest(OpShutdown, 5000, hport, func(h *Header) { h.Flags = ShutdownSend }, nil)
	mt.guest(OpRW, 5000, hport, nil, []byte("late"))
	mt.expect(MaxPayload, OpRST)
	if !s.closed || bytes.Contains(s.sent, []byte("late")) {
		t.Fatal("late data forwarded")
	}
}

func TestShutdownRcvDiscardsHostData(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	c := mt.conn(5000, hport)
	mt.guest(OpShutdown, 5000, hport, func(h *Header) { h.Flags = ShutdownRcv }, nil)
	mt.m.hostData(c, []byte("nobody reads this"))
	mt.expect(MaxPayload)
	if s.permits != 2 {
		t.Fatalf("%d permits: the host socket should keep draining", s.permits)
	}
}

func TestGuestRSTClosesHost(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	mt.guest(OpRST, 5000, hport, nil, nil)
	mt.expect(MaxPayload)
	if !s.closed || len(mt.m.conns) != 0 {
		t.Fatal("connection survived RST")
	}
}

func TestHostFailureResetsGuest(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 4096)
	mt.m.hostFailed(mt.conn(5000, hport))
	out := mt.expect(MaxPayload, OpRST)
	if !s.closed || out[0].h.DstPort != 5000 {
		t.Fatal("broken host socket not reset")
	}
}

func TestUnexpectedOpsReset(t *testing.T) {
	for _, op := range []Op{OpRequest, OpResponse} {
		mt := newMuxTest(t)
		s, hport := mt.established(5000, 4096)
		mt.guest(op, 5000, hport, nil, nil)
		mt.expect(MaxPayload, OpRST)
		if !s.closed {
			t.Fatalf("%v on an established connection not reset", op)
		}
	}
}

func TestReadBackpressure(t *testing.T) {
	mt := newMuxTest(t)
	s, hport := mt.established(5000, 0) // the guest has no buffer yet
	c := mt.conn(5000, hport)
	for i := 0; s.permits > i; i++ {
		mt.m.hostData(c, make([]byte, readChunk))
		if i > pendingLimit/readChunk+1 {
			t.Fatal("reader kept being permitted past the pending limit")
		}
	}
	if c.pending.Len() < pendingLimit || c.pending.Len() > pendingLimit+readChunk {
		t.Fatalf("holding %d bytes, limit %d", c.pending.Len(), pendingLimit)
	}
	permits := s.permits
	mt.expect(MaxPayload) // no credit, nothing sent
	mt.guest(OpCreditUpdate, 5000, hport, func(h *Header) { h.BufAlloc = 1 << 20 }, nil)
	mt.drain(MaxPayload)
	if c.pending.Len() != 0 || s.permits != permits+1 {
		t.Fatalf("pending %d, permits %d→%d: reading should resume once drained", c.pending.Len(), permits, s.permits)
	}
}

func TestRoundRobin(t *testing.T) {
	mt := newMuxTest(t)
	_, p1 := mt.established(1, 1<<20)
	_, p2 := mt.established(2, 1<<20)
	mt.m.hostData(mt.conn(1, p1), make([]byte, 300))
	mt.m.hostData(mt.conn(2, p2), make([]byte, 300))
	out := mt.drain(100)
	var order []uint32
	for _, p := range out {
		order = append(order, p.h.DstPort)
	}
	if fmt.Sprint(order) != "[1 2 1 2 1 2]" {
		t.Fatalf("packets went to ports %v, want alternating", order)
	}
}

func TestConnectionLimit(t *testing.T) {
	mt := newMuxTest(t)
	for i := range maxConns {
		if !mt.m.hostConnect(uint32(i), mt.now, func(*conn) hostStream { return &fakeStream{} }) {
			t.Fatalf("refused connection %d", i)
		}
	}
	if mt.m.hostConnect(1, mt.now, func(*conn) hostStream { return &fakeStream{} }) {
		t.Fatal("accepted past the limit")
	}
	mt.drain(MaxPayload)
	mt.guest(OpRequest, 9, 9, nil, nil)
	mt.expect(MaxPayload, OpRST)
	if len(mt.d.calls) != 0 {
		t.Fatal("dialled past the limit")
	}
}

func TestPortAllocation(t *testing.T) {
	mt := newMuxTest(t)
	mt.m.nextPort = 0xffffffff
	_, a := mt.hostConnect(5)
	_, b := mt.hostConnect(5)
	if a != 0xffffffff || b != firstEphemeralPort {
		t.Fatalf("ports %#x %#x, want wrap to %#x", a, b, firstEphemeralPort)
	}
	// A port in use is skipped; a freed one is reused.
	mt.m.nextPort = a
	_, c := mt.hostConnect(6)
	if c != firstEphemeralPort+1 {
		t.Fatalf("port %#x, want %#x (skipping two in use)", c, firstEphemeralPort+1)
	}
	mt.guest(OpRST, 5, a, nil, nil)
	mt.m.nextPort = a
	_, d := mt.hostConnect(7)
	if d != a {
		t.Fatalf("freed port %#x not reused, got %#x", a, d)
	}
}

func TestControlBacklog(t *testing.T) {
	mt := newMuxTest(t)
	for i := range maxControlBacklog {
		if !mt.m.acceptingGuestPackets() {
			t.Fatalf("stopped after %d replies", i)
		}
		mt.guest(OpRW, uint32(i), 1, nil, nil) // unknown: RST each
	}
	if mt.m.acceptingGuestPackets() {
		t.Fatal("still accepting with a full reply backlog")
	}
	mt.m.next(0)
	if !mt.m.acceptingGuestPackets() {
		t.Fatal("not accepting after a reply went out")
	}
}

func TestCloseAll(t *testing.T) {
	mt := newMuxTest(t)
	s1, _ := mt.established(1, 4096)
	s2, _ := mt.hostConnect(2)
	mt.guest(OpRW, 3, 3, nil, nil) // a queued RST
	mt.m.closeAll()
	if !s1.closed || !s2.closed || len(mt.m.conns) != 0 || mt.m.hasOutput() {
		t.Fatal("closeAll left state behind")
	}
}

func TestTinyRxBuffer(t *testing.T) {
	mt := newMuxTest(t)
	_, hport := mt.established(5000, 4096)
	mt.m.hostData(mt.conn(5000, hport), []byte("data"))
	// A buffer with room for the header only cannot carry data.
	if _, _, ok := mt.m.next(0); ok {
		t.Fatal("packet produced for a header-only buffer")
	}
	out := mt.expect(MaxPayload, OpRW)
	if string(out[0].payload) != "data" {
		t.Fatal("data lost")
	}
}

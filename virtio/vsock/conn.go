package vsock

import (
	"errors"
	"fmt"
	"time"
)

// hostStream is the host end of one connection as the muxer sees it: the
// Unix socket side (unix.go) in the device, a recording fake in tests. Every
// method returns at once, because the muxer runs on the device worker, which
// must never wait on a host socket; completions come back later as events
// (written bytes, read data, EOF, errors).
type hostStream interface {
	// Send queues a copy of p for writing to the host socket.
	Send(p []byte)
	// CloseWrite half-closes the host socket once everything sent before
	// it has been written.
	CloseWrite()
	// PermitRead lets the reader take one more chunk from the host socket.
	// The muxer grants one permit at a time, which is what bounds the host
	// data it holds per connection.
	PermitRead()
	// Close closes the host socket; events still in flight are ignored.
	Close()
}

// connState is where a connection is in its life.
type connState uint8

const (
	// stateLocalInit: a host program asked for it; the REQUEST to the guest
	// is queued or sent, and the RESPONSE has not arrived.
	stateLocalInit connState = iota
	// statePeerInit: the guest sent a REQUEST; the host listener is being
	// dialled.
	statePeerInit
	// stateEstablished: data flows.
	stateEstablished
	// stateClosing: the guest shut down both directions; the device
	// finishes writing the guest's data to the host, then sends RST.
	stateClosing
)

func (s connState) String() string {
	switch s {
	case stateLocalInit:
		return "local-init"
	case statePeerInit:
		return "peer-init"
	case stateEstablished:
		return "established"
	case stateClosing:
		return "closing"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// connKey identifies a connection: ports are all a stream is addressed by,
// since the guest and host CIDs are fixed for the device.
type connKey struct {
	local uint32 // host-side port: dst_port of the guest's packets
	peer  uint32 // guest-side port: src_port of the guest's packets
}

// owed is a set of control packets the device owes the guest on a
// connection. They are flags rather than queued packets so that a guest
// asking for credit a thousand times gets one answer.
type owed uint8

const (
	oweRequest owed = 1 << iota
	oweResponse
	oweCreditUpdate
)

// errCreditExceeded reports a guest that sent more than the buffer the
// device advertised.
var errCreditExceeded = errors.New("vsock: guest exceeded the advertised credit")

// conn is one stream connection. It is owned by the device worker; only the
// stream's goroutines run elsewhere, and they talk to it through events.
type conn struct {
	key    connKey
	state  connState
	stream hostStream // nil only in statePeerInit, while dialling
	// ephemeral: the local port was allocated for a host-initiated
	// connection and returns to the pool with it.
	ephemeral bool

	// Guest to host. The guest spends the credit the device advertises
	// (hostBufAlloc); bytes count as consumed (fwdCnt) once written to the
	// host socket. Counters wrap, as the protocol's do.
	rxCnt          uint32 // payload bytes received from the guest
	fwdCnt         uint32 // of those, written to the host
	lastFwdCntSent uint32 // the fwdCnt the guest last saw in a header
	ctrlBytes      int    // bytes queued to the host that are not stream data ("OK <port>\n")

	// Host to guest. The device spends the guest's credit.
	pending       chunkQueue // read from the host, not yet sent to the guest
	txCnt         uint32     // payload bytes sent to the guest
	peerBufAlloc  uint32     // the guest's buffer for this connection
	peerFwdCnt    uint32     // bytes the guest has consumed of what we sent
	readPermitted bool       // the reader holds a permit to read one chunk
	hostEOF       bool       // the host will send no more

	peerShutdown  uint32 // Shutdown* flags the guest sent
	localShutdown uint32 // Shutdown* flags the device sent

	owe      owed
	deadline time.Time // zero when no timer runs
	queued   bool      // in the muxer's ready list
	dead     bool      // removed from the table; late events are ignored

	// dialing: the dial for this guest-initiated connection has not
	// reported back. It holds a connection slot until it does, even after
	// the connection is removed (see muxer.orphanDials); cancelDial
	// abandons it.
	dialing    bool
	cancelDial func()
}

// header returns a packet header for c from the host to the guest. Every
// header carries the device's credit, so sending one also answers any
// pending CREDIT_UPDATE.
func (c *conn) header(op Op, guestCID uint64) Header {
	c.lastFwdCntSent = c.fwdCnt
	c.owe &^= oweCreditUpdate
	return Header{
		SrcCID:   HostCID,
		DstCID:   guestCID,
		SrcPort:  c.key.local,
		DstPort:  c.key.peer,
		Type:     TypeStream,
		Op:       op,
		BufAlloc: hostBufAlloc,
		FwdCnt:   c.fwdCnt,
	}
}

// peerCredit is how many more payload bytes the guest can take. A guest
// reporting more consumed than was sent (fwd_cnt ahead of tx_cnt) makes the
// subtraction wrap to a huge in-flight count, which yields zero: a lying
// guest only stalls its own connection.
func (c *conn) peerCredit() uint32 {
	inFlight := c.txCnt - c.peerFwdCnt
	if inFlight >= c.peerBufAlloc {
		return 0
	}
	return c.peerBufAlloc - inFlight
}

// receive accounts for n payload bytes from the guest, refusing them if they
// do not fit the credit the device advertised.
func (c *conn) receive(n uint32) error {
	inFlight := c.rxCnt - c.fwdCnt
	if uint64(inFlight)+uint64(n) > hostBufAlloc {
		return fmt.Errorf("%w: %d bytes buffered, %d more sent, %d advertised", errCreditExceeded, inFlight, n, hostBufAlloc)
	}
	c.rxCnt += n
	return nil
}

// forwarded accounts for n bytes written to the host socket: first the
// device's own control bytes, then stream data, which frees guest credit.
func (c *conn) forwarded(n int) {
	ctrl := min(n, c.ctrlBytes)
	c.ctrlBytes -= ctrl
	c.fwdCnt += uint32(n - ctrl)
	if c.state == stateEstablished && c.fwdCnt-c.lastFwdCntSent >= creditUpdateThreshold {
		c.owe |= oweCreditUpdate
	}
}

// flushed reports whether everything received from the guest reached the
// host socket.
func (c *conn) flushed() bool {
	return c.rxCnt == c.fwdCnt && c.ctrlBytes == 0
}

// finished reports whether no byte can flow in either direction any more,
// so the device should send RST and forget the connection.
func (c *conn) finished() bool {
	if !c.flushed() {
		return false
	}
	if c.state == stateClosing {
		return true
	}
	return c.state == stateEstablished &&
		c.peerShutdown&ShutdownSend != 0 && c.localShutdown&ShutdownSend != 0
}

// shutdownDue reports whether the device should tell the guest it will send
// no more: the host reached EOF and every byte before it went to the guest.
func (c *conn) shutdownDue() bool {
	return c.hostEOF && c.pending.Len() == 0 && c.localShutdown&ShutdownSend == 0
}

// wantsToSend reports whether c has a packet for the guest now.
func (c *conn) wantsToSend() bool {
	if c.dead {
		return false
	}
	if c.owe != 0 {
		return true
	}
	if c.state != stateEstablished {
		return false
	}
	return (c.pending.Len() > 0 && c.peerCredit() > 0) || c.shutdownDue()
}

// next produces c's next packet for the guest with at most maxPayload bytes
// of data, taken from one chunk the reader handed over (never written
// again, so the payload stays valid). Order matters: the handshake first,
// then data, then the SHUTDOWN that must follow the last byte. ok is false
// when nothing fits.
func (c *conn) next(maxPayload int, guestCID uint64) (h Header, payload []byte, ok bool) {
	switch {
	case c.owe&oweRequest != 0:
		c.owe &^= oweRequest
		return c.header(OpRequest, guestCID), nil, true
	case c.owe&oweResponse != 0:
		c.owe &^= oweResponse
		return c.header(OpResponse, guestCID), nil, true
	}
	if c.state == stateEstablished {
		if payload = c.pending.take(min(int(min(c.peerCredit(), MaxPayload)), maxPayload)); payload != nil {
			n := len(payload)
			c.txCnt += uint32(n)
			h = c.header(OpRW, guestCID)
			h.Len = uint32(n)
			return h, payload, true
		}
		if c.shutdownDue() {
			c.localShutdown |= ShutdownSend
			h = c.header(OpShutdown, guestCID)
			h.Flags = ShutdownSend
			return h, nil, true
		}
	}
	if c.owe&oweCreditUpdate != 0 {
		return c.header(OpCreditUpdate, guestCID), nil, true
	}
	return Header{}, nil, false
}

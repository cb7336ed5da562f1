package vsock

import (
	"log/slog"
	"strconv"
	"time"
)

// dialer connects guest-initiated connections to host listeners. Dial
// returns at once; the result comes back to the muxer as dialDone, exactly
// once per Dial, even after cancel. cancel abandons the dial (the guest
// reset the connection): a socket it produced is closed rather than handed
// over.
type dialer interface {
	Dial(c *conn, port uint32) (cancel func())
}

// muxer is the connection table: it turns guest packets into host actions
// and host events into packets for the guest. It knows nothing of guest
// memory or sockets (those are the worker's and the streams'), which keeps
// the whole protocol testable with plain values.
//
// It is owned by the device worker goroutine and is not safe for concurrent
// use.
type muxer struct {
	guestCID uint64
	dialer   dialer

	conns     map[connKey]*conn
	ephemeral map[uint32]bool // local ports handed to host-initiated connections
	nextPort  uint32
	// orphanDials counts dials still in flight for connections already
	// removed from conns (the guest reset them, or they timed out). Each
	// holds a goroutine and may hold a socket until it reports back, so it
	// keeps its connection slot until then: otherwise a guest sending
	// REQUEST and RST in a loop starts dials without limit.
	orphanDials int

	// control holds packets that belong to no live connection (RST
	// replies, and the final RST of a connection already forgotten), sent
	// before any connection's packets.
	control []Header
	// ready lists connections with a packet for the guest, in turn.
	ready []*conn
}

func newMuxer(guestCID uint64, d dialer) *muxer {
	return &muxer{
		guestCID:  guestCID,
		dialer:    d,
		conns:     make(map[connKey]*conn),
		ephemeral: make(map[uint32]bool),
		nextPort:  firstEphemeralPort,
	}
}

// slotsUsed is what counts against maxConns: live connections and the
// dials of removed ones that have not reported back.
func (m *muxer) slotsUsed() int { return len(m.conns) + m.orphanDials }

// acceptingGuestPackets reports whether the device should read more of the
// guest's tx queue. Every packet may need a reply; when replies pile up
// because the guest supplies no rx buffers, the device stops reading until
// it does, rather than queueing replies without bound.
func (m *muxer) acceptingGuestPackets() bool {
	return len(m.control) < maxControlBacklog
}

// refuse answers a guest packet that failed validation with err.
func (m *muxer) refuse(h Header, err error) {
	if answerable(h, err) {
		m.reply(h, OpRST)
	}
}

// reply queues a connection-less packet answering h.
func (m *muxer) reply(h Header, op Op) {
	m.control = append(m.control, Header{
		SrcCID:  HostCID,
		DstCID:  h.SrcCID,
		SrcPort: h.DstPort,
		DstPort: h.SrcPort,
		Type:    h.Type,
		Op:      op,
	})
}

// guestPacket handles one validated packet from the guest. payload is only
// read during the call, and may be a view of guest memory that the guest
// changes meanwhile: nothing may depend on its bytes.
func (m *muxer) guestPacket(h Header, payload []byte, now time.Time) {
	key := connKey{local: h.DstPort, peer: h.SrcPort}
	c := m.conns[key]
	if c == nil {
		switch h.Op {
		case OpRequest:
			m.guestRequest(key, h, now)
		case OpRST:
			// Nothing to reset, and answering an RST would start a ping-pong.
		default:
			m.reply(h, OpRST)
		}
		return
	}
	// Every packet carries the guest's current credit.
	c.peerBufAlloc, c.peerFwdCnt = h.BufAlloc, h.FwdCnt

	switch c.state {
	case stateLocalInit:
		switch {
		case h.Op == OpResponse && c.owe&oweRequest == 0:
			m.establishLocal(c)
		case h.Op == OpRST:
			// Nothing listens on that guest port, or its backlog is full.
			// The host program sees only its socket closed: say why here.
			slog.Warn("vsock: the guest refused a host connection", "port", c.key.peer)
			m.drop(c)
		default: // including a RESPONSE to a REQUEST not yet sent
			m.reset(c)
		}
	case statePeerInit:
		switch h.Op {
		case OpRST:
			m.drop(c)
		case OpCreditUpdate:
		default:
			m.reset(c)
		}
	default:
		m.connected(c, h, payload, now)
	}
	m.schedule(c)
}

// guestRequest opens a guest-initiated connection: dial the host listener
// for the port; the RESPONSE (or RST) goes out when the dial completes.
func (m *muxer) guestRequest(key connKey, h Header, now time.Time) {
	if m.slotsUsed() >= maxConns {
		m.reply(h, OpRST)
		return
	}
	c := &conn{
		key:          key,
		state:        statePeerInit,
		peerBufAlloc: h.BufAlloc,
		peerFwdCnt:   h.FwdCnt,
		deadline:     now.Add(connectTimeout),
	}
	m.conns[key] = c
	c.dialing = true
	c.cancelDial = m.dialer.Dial(c, key.local)
}

// establishLocal completes a host-initiated connection: the guest accepted,
// so the host program learns its port and data may flow.
func (m *muxer) establishLocal(c *conn) {
	c.state = stateEstablished
	c.deadline = time.Time{}
	line := "OK " + strconv.FormatUint(uint64(c.key.local), 10) + "\n"
	c.ctrlBytes += len(line)
	c.stream.Send([]byte(line))
	m.permit(c)
}

// connected handles a packet on an established or closing connection.
func (m *muxer) connected(c *conn, h Header, payload []byte, now time.Time) {
	switch h.Op {
	case OpRW:
		if c.state == stateClosing || c.peerShutdown&ShutdownSend != 0 {
			m.reset(c) // data after the guest said it would send none
			return
		}
		if err := c.receive(h.Len); err != nil {
			m.reset(c)
			return
		}
		if len(payload) > 0 {
			c.stream.Send(payload)
		}
	case OpCreditUpdate:
		// The credit was recorded above; schedule will send held data.
	case OpCreditRequest:
		if c.state == stateEstablished {
			c.owe |= oweCreditUpdate
		}
	case OpShutdown:
		m.guestShutdown(c, h.Flags&ShutdownBoth, now)
	case OpRST:
		m.drop(c)
	default: // REQUEST or RESPONSE on a live connection
		m.reset(c)
	}
}

// guestShutdown applies the guest's SHUTDOWN flags.
func (m *muxer) guestShutdown(c *conn, flags uint32, now time.Time) {
	added := flags &^ c.peerShutdown
	c.peerShutdown |= flags
	if added&ShutdownRcv != 0 {
		// The guest reads no more: drop what it would have read. The
		// reader keeps draining the host socket (discarding) so the host
		// program does not block on a peer that is gone.
		c.pending.reset()
	}
	if added&ShutdownSend != 0 {
		c.stream.CloseWrite()
	}
	if c.peerShutdown == ShutdownBoth && c.state != stateClosing {
		c.state = stateClosing
		c.owe = 0
		c.deadline = now.Add(closeTimeout)
	}
	m.finishIfDone(c)
}

// hostConnect opens a host-initiated connection to guest port port: a host
// program sent "CONNECT port". open attaches the host socket to the new
// connection. It returns false when every connection slot is taken.
func (m *muxer) hostConnect(port uint32, now time.Time, open func(*conn) hostStream) bool {
	if m.slotsUsed() >= maxConns {
		return false
	}
	key := connKey{local: m.allocatePort(port), peer: port}
	c := &conn{
		key:       key,
		state:     stateLocalInit,
		ephemeral: true,
		owe:       oweRequest,
		deadline:  now.Add(connectTimeout),
	}
	c.stream = open(c)
	m.conns[key] = c
	m.ephemeral[key.local] = true
	m.schedule(c)
	return true
}

// allocatePort returns a free host-side port for a connection to guest port
// peer. There are 3·2^30 candidates and at most maxConns in use, so the
// search ends quickly.
func (m *muxer) allocatePort(peer uint32) uint32 {
	for {
		p := m.nextPort
		m.nextPort++
		if m.nextPort < firstEphemeralPort { // wrapped past 2^32-1
			m.nextPort = firstEphemeralPort
		}
		if !m.ephemeral[p] && m.conns[connKey{local: p, peer: peer}] == nil {
			return p
		}
	}
}

// dialDone completes a guest-initiated connection's dial. On success open
// attaches the host socket to c; it is called only if c still lives, and
// dialDone reports whether it was, so the caller closes an unused socket.
// Either way the dial's slot is free afterwards.
func (m *muxer) dialDone(c *conn, err error, open func(*conn) hostStream) (opened bool) {
	if !c.dialing {
		return false // not a dial of ours: ignore rather than miscount
	}
	c.dialing, c.cancelDial = false, nil
	if c.dead {
		m.orphanDials--
		return false
	}
	if err != nil {
		m.reset(c)
		return false
	}
	c.stream = open(c)
	c.state = stateEstablished
	c.deadline = time.Time{}
	c.owe |= oweResponse
	m.permit(c)
	m.schedule(c)
	return true
}

// hostData takes a chunk the reader read from the host socket; data is
// handed over and not copied.
func (m *muxer) hostData(c *conn, data []byte) {
	if c.dead {
		return
	}
	c.readPermitted = false
	if c.peerShutdown&ShutdownRcv == 0 {
		c.pending.push(data)
	}
	m.permit(c)
	m.schedule(c)
}

// hostEOF notes that the host program will send no more.
func (m *muxer) hostEOF(c *conn) {
	if c.dead {
		return
	}
	c.readPermitted = false
	c.hostEOF = true
	m.schedule(c)
}

// hostWritten accounts for n bytes the writer wrote to the host socket.
func (m *muxer) hostWritten(c *conn, n int) {
	if c.dead {
		return
	}
	c.forwarded(n)
	m.finishIfDone(c)
	m.schedule(c)
}

// hostFailed handles a read or write error on the host socket: the stream
// is broken, so the guest gets RST.
func (m *muxer) hostFailed(c *conn) {
	if !c.dead {
		m.reset(c)
	}
}

// expire resets connections whose timer ran out: a guest that never
// answered a REQUEST, a dial that hung, a host that will not take the last
// of the guest's data. It returns the guest ports of the host connections
// the guest never answered, which the worker reports.
func (m *muxer) expire(now time.Time) (unanswered []uint32) {
	for _, c := range m.conns {
		if !c.deadline.IsZero() && !now.Before(c.deadline) {
			if c.state == stateLocalInit && c.ephemeral {
				unanswered = append(unanswered, c.key.peer)
			}
			m.reset(c)
		}
	}
	return unanswered
}

// nextDeadline returns the earliest connection timer.
func (m *muxer) nextDeadline() (time.Time, bool) {
	var first time.Time
	for _, c := range m.conns {
		if !c.deadline.IsZero() && (first.IsZero() || c.deadline.Before(first)) {
			first = c.deadline
		}
	}
	return first, !first.IsZero()
}

// closeAll forgets every connection and closes its host socket without a
// word to the guest: the device is being reset, or the guest is told the
// transport reset, and either way it drops its connections itself.
func (m *muxer) closeAll() {
	for _, c := range m.conns {
		m.remove(c)
	}
	m.control = nil
	m.ready = nil
}

// hasOutput reports whether a packet is waiting for the guest, dropping
// ready entries that have nothing left to send (credit ran out, the
// connection died).
func (m *muxer) hasOutput() bool {
	if len(m.control) > 0 {
		return true
	}
	for len(m.ready) > 0 {
		if m.ready[0].wantsToSend() {
			return true
		}
		m.ready[0].queued = false
		m.ready[0] = nil
		m.ready = m.ready[1:]
	}
	return false
}

// next returns the next packet for the guest with at most maxPayload bytes
// of payload, which is valid until the muxer is next called. Connections
// take turns, one packet each, so a bulk transfer does not starve the rest.
func (m *muxer) next(maxPayload int) (Header, []byte, bool) {
	if len(m.control) > 0 {
		h := m.control[0]
		m.control = m.control[1:]
		return h, nil, true
	}
	if !m.hasOutput() {
		return Header{}, nil, false
	}
	c := m.ready[0]
	m.ready[0] = nil
	m.ready = m.ready[1:]
	c.queued = false
	h, payload, ok := c.next(maxPayload, m.guestCID)
	switch {
	case ok && h.Op == OpRW:
		m.permit(c) // room freed in the pending buffer
	case ok && h.Op == OpShutdown:
		m.finishIfDone(c)
	}
	m.schedule(c)
	return h, payload, ok
}

// schedule puts c on the ready list if it has something to send.
func (m *muxer) schedule(c *conn) {
	if !c.queued && c.wantsToSend() {
		c.queued = true
		m.ready = append(m.ready, c)
	}
}

// permit lets c's reader read another chunk if c has room for it.
func (m *muxer) permit(c *conn) {
	if c.dead || c.readPermitted || c.hostEOF || c.state != stateEstablished || c.pending.Len() >= pendingLimit {
		return
	}
	c.readPermitted = true
	c.stream.PermitRead()
}

// finishIfDone closes c with RST once nothing can flow any more.
func (m *muxer) finishIfDone(c *conn) {
	if !c.dead && c.finished() {
		m.reset(c)
	}
}

// reset closes c and tells the guest with RST.
func (m *muxer) reset(c *conn) {
	m.control = append(m.control, c.header(OpRST, m.guestCID))
	m.remove(c)
}

// drop closes c without a word to the guest (it sent the RST).
func (m *muxer) drop(c *conn) {
	m.remove(c)
}

// remove forgets c and closes its host socket. A dial still in flight is
// cancelled and keeps c's slot (orphanDials) until it reports back.
func (m *muxer) remove(c *conn) {
	if c.dead {
		return
	}
	c.dead = true
	delete(m.conns, c.key)
	if c.ephemeral {
		delete(m.ephemeral, c.key.local)
	}
	if c.dialing {
		m.orphanDials++
		if c.cancelDial != nil {
			c.cancelDial()
		}
	}
	if c.stream != nil {
		c.stream.Close()
	}
	c.pending.reset()
}

package vsock

import (
	"encoding/binary"
	"io"
	"log/slog"
	"time"

	"github.com/smolvm/smol/virtio"
)

// Queue indices (virtio 1.2, 5.10.2).
const (
	rxQueue    = 0 // device to driver packets
	txQueue    = 1 // driver to device packets
	eventQueue = 2 // device to driver events
	numQueues  = 3
)

// eventTransportReset is VIRTIO_VSOCK_EVENT_TRANSPORT_RESET: every
// connection is gone and the guest must re-read the CID.
const eventTransportReset = 0

// worker is one activation of the device: the goroutine that owns the
// three queues and the muxer, and the host side it started. Nothing else
// touches the queues or the muxer while it runs.
type worker struct {
	cid    uint64
	path   string                   // the device's Unix socket; host ports are path_PORT
	queues [numQueues]*virtio.Queue // the event queue may be nil
	irq    virtio.Interrupter
	life   *virtio.Worker // set by run, like everything below
	mux    *muxer
	host   *unixHost

	incoming   <-chan incomingConn // host programs from the device's listener
	resetCalls chan chan struct{}  // SendTransportReset requests

	eventsOwed int // TRANSPORT_RESET events not yet delivered
	// The reset gate: while a TRANSPORT_RESET is owed, and after it is
	// delivered until the driver has handled it (it refills the event
	// queue afterwards, moving its avail index past resetAvail), the
	// worker holds back host programs' connections, for at most
	// resetGateMax. A connection made sooner would be dropped by the
	// guest's own reset of its sockets.
	resetGate  time.Time                     // zero: no gate
	resetAvail uint16                        // the event queue's avail index at the delivery
	resetSent  bool                          // the owed event is in the guest's hands
	pushed     [numQueues]bool               // queues with used entries not yet signalled
	packet     [HeaderSize + MaxPayload]byte // one tx packet, copied out of the guest
}

// run serves the queues and the host side until the device is reset, then
// closes every host connection and waits for their goroutines. A pause
// parks it with its connection table intact; host sockets meanwhile hold
// their data (their goroutines wait to hand it over).
func (w *worker) run(life *virtio.Worker) {
	w.life = life
	w.host = newUnixHost(w.path, life.Stop())
	w.mux = newMuxer(w.cid, w.host)
	defer w.shutdown()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		more := w.pump()
		if d, ok := w.mux.nextDeadline(); ok {
			timer.Reset(time.Until(d))
		} else {
			timer.Stop()
		}
		if more {
			// The pass spent its tx budget with guest packets left: take
			// what the host side has ready, without waiting, and go round
			// again. A guest that keeps its tx queue full therefore cannot
			// hold off host data, dial results (which free connection
			// slots), host programs, reset calls or timers.
			if !w.serviceReady(timer.C) {
				return
			}
			continue
		}
		incoming, gatePoll := w.incomingUnlessGated()
		select {
		case <-life.Stop():
			return
		case <-life.Pausing():
			if !life.Park() {
				return
			}
		case <-life.Wake(0):
		case <-gatePoll:
		case ev := <-w.host.events:
			w.hostEvent(ev)
		case in := <-incoming:
			w.accept(in)
		case reply := <-w.resetCalls:
			w.transportReset(reply)
		case now := <-timer.C:
			w.expire(now)
		}
	}
}

// serviceReady handles up to hostEventBudget host events, host programs,
// reset calls and timer expiries that are ready now, returning as soon as
// none is. It is bounded too, so that the guest's queues get their turn
// when the host side is the busy one. false means the worker must stop.
func (w *worker) serviceReady(timer <-chan time.Time) bool {
	for range hostEventBudget {
		incoming, _ := w.incomingUnlessGated()
		select {
		case <-w.life.Stop():
			return false
		case <-w.life.Pausing():
			// Park here, between passes: going round again would
			// pump the queues of a paused device.
			return w.life.Park()
		case ev := <-w.host.events:
			w.hostEvent(ev)
		case in := <-incoming:
			w.accept(in)
		case reply := <-w.resetCalls:
			w.transportReset(reply)
		case now := <-timer:
			w.expire(now)
		default:
			return true
		}
	}
	return true
}

// expire runs the connection timers. A host connection the guest never
// answered is logged with where the queues stand, so that a guest that
// stopped answering can be told apart from one whose packets or interrupts
// went missing: rx shows whether the REQUEST found a buffer and the guest
// took it, tx whether the guest sent anything since.
func (w *worker) expire(now time.Time) {
	ports := w.mux.expire(now)
	if len(ports) == 0 {
		return
	}
	slog.Warn("vsock: the guest did not answer a host connection in time",
		"ports", ports, "timeout", connectTimeout,
		"rx", w.queues[rxQueue].Describe(), "tx", w.queues[txQueue].Describe(),
		"connections", len(w.mux.conns), "backlog", len(w.mux.control))
}

// resetGateMax bounds the reset gate for a driver that never refills its
// event queue.
const resetGateMax = 10 * time.Second

// incomingUnlessGated is the channel of host programs to accept from, nil
// while the reset gate is closed; then poll fires when the gate should be
// looked at again (the driver's refill need not notify).
func (w *worker) incomingUnlessGated() (incoming <-chan incomingConn, poll <-chan time.Time) {
	if w.resetGate.IsZero() {
		return w.incoming, nil
	}
	q := w.queues[eventQueue]
	handled := w.eventsOwed == 0 && w.resetSent && q != nil && q.AvailIdx() != w.resetAvail
	if q == nil || handled || time.Now().After(w.resetGate) {
		w.resetGate, w.resetSent = time.Time{}, false
		return w.incoming, nil
	}
	return nil, time.After(2 * time.Millisecond)
}

// owe records a TRANSPORT_RESET to deliver and closes the reset gate.
func (w *worker) owe() {
	w.eventsOwed = min(w.eventsOwed+1, queueSize)
	w.resetGate, w.resetSent = time.Now().Add(resetGateMax), false
}

// transportReset drops every connection and owes the guest a
// TRANSPORT_RESET event (SendTransportReset).
func (w *worker) transportReset(reply chan struct{}) {
	w.mux.closeAll()
	w.owe()
	close(reply)
}

// hostEvent applies one report from a host-side goroutine.
func (w *worker) hostEvent(ev hostEvent) {
	switch ev.kind {
	case evData:
		w.mux.hostData(ev.conn, ev.data)
	case evEOF:
		w.mux.hostEOF(ev.conn)
	case evWritten:
		w.mux.hostWritten(ev.conn, ev.n)
	case evFailed:
		w.mux.hostFailed(ev.conn)
	case evDialed:
		opened := w.mux.dialDone(ev.conn, ev.err, func(c *conn) hostStream {
			return w.host.newStream(c, ev.sock)
		})
		if !opened && ev.sock != nil {
			ev.sock.Close() // the guest reset the connection meanwhile
		}
	}
}

// accept starts a host-initiated connection.
func (w *worker) accept(in incomingConn) {
	ok := w.mux.hostConnect(in.port, time.Now(), func(c *conn) hostStream {
		return w.host.newStream(c, in.sock)
	})
	if !ok {
		in.sock.Close()
	}
}

// txStop says why processTx returned.
type txStop uint8

const (
	txEmpty   txStop = iota // the guest has no more packets queued
	txBlocked               // replies back up for want of rx buffers
	txBudget                // the pass's budget is spent; more may wait
)

// pump is one pass: guest packets in (at most txBudgetPerPass chains),
// packets for the guest out, owed events, then interrupts. It reports
// whether it stopped on the budget with guest packets possibly left, so
// that the caller comes back without waiting for a notification.
func (w *worker) pump() (more bool) {
	budget := txBudgetPerPass
	for {
		n, stop := w.processTx(budget)
		budget -= n
		w.fillRx()
		if stop == txBudget {
			more = true
			break
		}
		// Reading tx stopped on the reply backlog; go on only if the
		// guest's rx buffers drained it.
		if stop == txEmpty || !w.mux.acceptingGuestPackets() {
			break
		}
	}
	w.deliverEvents()
	w.signal()
	return more
}

// processTx reads up to budget of the guest's tx chains (malformed ones
// included) and returns how many it took and why it stopped.
func (w *worker) processTx(budget int) (n int, stop txStop) {
	q := w.queues[txQueue]
	for ; n < budget; n++ {
		if !w.mux.acceptingGuestPackets() {
			return n, txBlocked
		}
		chain, err := q.Pop()
		if err != nil {
			continue // malformed chain: its head is consumed, skip it
		}
		if chain == nil {
			return n, txEmpty
		}
		w.txPacket(chain)
		if q.Push(chain, 0) == nil {
			w.pushed[txQueue] = true
		}
	}
	return n, txBudget
}

// txPacket reads one packet from guest memory, validates it and hands it
// to the muxer. The header is copied first and the checks apply to that
// copy, since the guest may rewrite its buffers meanwhile. The payload is
// only passed on to the host as is, so when it lies in one buffer (as
// Linux's do) the muxer gets a view of guest memory instead of a copy.
func (w *worker) txPacket(chain *virtio.Chain) {
	r := chain.NewReader()
	hdr := w.packet[:HeaderSize]
	if _, err := io.ReadFull(r, hdr); err != nil {
		return // shorter than a header: no one to answer
	}
	h, err := ParseHeader(hdr)
	if err == nil {
		err = h.Validate(w.cid, r.Remaining())
	}
	if err != nil {
		w.mux.refuse(h, err)
		return
	}
	payload, err := r.Next(h.Len)
	if err == nil && uint32(len(payload)) < h.Len {
		// Spread over several buffers: gather it.
		buf := w.packet[HeaderSize : HeaderSize+int(h.Len)]
		n := copy(buf, payload)
		_, err = io.ReadFull(r, buf[n:])
		payload = buf
	}
	if err != nil {
		w.mux.refuse(h, ErrPayloadTruncated)
		return
	}
	w.mux.guestPacket(h, payload, time.Now())
}

// fillRx writes packets for the guest into its rx buffers while both exist.
func (w *worker) fillRx() {
	q := w.queues[rxQueue]
	for w.mux.hasOutput() {
		chain, err := q.Pop()
		if err != nil {
			continue
		}
		if chain == nil {
			return // the packets wait, bounded, for the guest's buffers
		}
		if q.Push(chain, w.rxPacket(chain)) == nil {
			w.pushed[rxQueue] = true
		}
	}
}

// rxPacket writes the next packet that fits chain and returns its length;
// 0 (the buffer returned empty) when the buffer cannot hold a header.
func (w *worker) rxPacket(chain *virtio.Chain) uint32 {
	room := chain.WritableLen()
	if room < HeaderSize {
		return 0
	}
	h, payload, ok := w.mux.next(int(min(room-HeaderSize, MaxPayload)))
	if !ok {
		return 0
	}
	var hdr [HeaderSize]byte
	h.Encode(hdr[:])
	cw := chain.NewWriter()
	// Cannot fail: the packet was sized to the chain, whose buffers Pop
	// checked lie in guest RAM.
	_, _ = cw.Write(hdr[:])
	_, _ = cw.Write(payload)
	return cw.Written()
}

// deliverEvents writes owed TRANSPORT_RESET events into the event queue.
func (w *worker) deliverEvents() {
	q := w.queues[eventQueue]
	for w.eventsOwed > 0 && q != nil {
		chain, err := q.Pop()
		if err != nil {
			continue
		}
		if chain == nil {
			return
		}
		var written uint32
		if chain.WritableLen() >= 4 {
			var ev [4]byte
			binary.LittleEndian.PutUint32(ev[:], eventTransportReset)
			cw := chain.NewWriter()
			_, _ = cw.Write(ev[:])
			written = cw.Written()
			w.eventsOwed--
			w.resetGate, w.resetAvail, w.resetSent = time.Now().Add(resetGateMax), q.AvailIdx(), true
		}
		if q.Push(chain, written) == nil {
			w.pushed[eventQueue] = true
		}
	}
}

// signal raises the used-buffer interrupt for each queue that got used
// entries, if its driver wants one.
func (w *worker) signal() {
	for i, q := range w.queues {
		if !w.pushed[i] {
			continue
		}
		w.pushed[i] = false
		if q.NeedsInterrupt() {
			// A failed interrupt (the VM is stopping) leaves nothing to
			// do here: the transport reports it and resets the device.
			_ = w.irq.SignalUsed(i)
		}
	}
}

// shutdown closes everything the worker started, once its loop is over:
// every host socket, then the socket goroutines.
func (w *worker) shutdown() {
	w.host.cancel()
	w.mux.closeAll()
	w.host.wg.Wait()
}

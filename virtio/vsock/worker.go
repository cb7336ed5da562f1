package vsock

import (
	"encoding/binary"
	"io"
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
	queues [numQueues]*virtio.Queue // the event queue may be nil
	irq    virtio.Interrupter
	mux    *muxer
	host   *unixHost

	notify     <-chan struct{}     // the device's Notify signal
	incoming   <-chan incomingConn // host programs from the device's listener
	resetCalls chan chan struct{}  // SendTransportReset requests
	stop       chan struct{}
	done       chan struct{}

	eventsOwed int                           // TRANSPORT_RESET events not yet delivered
	pushed     [numQueues]bool               // queues with used entries not yet signalled
	packet     [HeaderSize + MaxPayload]byte // one tx packet, copied out of the guest
}

func (w *worker) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		w.pump()
		if d, ok := w.mux.nextDeadline(); ok {
			timer.Reset(time.Until(d))
		} else {
			timer.Stop()
		}
		select {
		case <-w.stop:
			return
		case <-w.notify:
		case ev := <-w.host.events:
			w.hostEvent(ev)
		case in := <-w.incoming:
			w.accept(in)
		case reply := <-w.resetCalls:
			w.mux.closeAll()
			w.eventsOwed = min(w.eventsOwed+1, queueSize)
			close(reply)
		case now := <-timer.C:
			w.mux.expire(now)
		}
	}
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
		w.mux.dialDone(ev.conn, ev.stream, ev.err)
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

// pump moves everything that can move: guest packets in, packets for the
// guest out, owed events, then interrupts.
func (w *worker) pump() {
	for {
		blocked := w.processTx()
		w.fillRx()
		// Reading tx stopped on the reply backlog; go on only if the
		// guest's rx buffers drained it.
		if !blocked || !w.mux.acceptingGuestPackets() {
			break
		}
	}
	w.deliverEvents()
	w.signal()
}

// processTx reads the guest's packets until the tx queue is empty (false)
// or replies back up for want of rx buffers (true).
func (w *worker) processTx() (blocked bool) {
	q := w.queues[txQueue]
	for {
		if !w.mux.acceptingGuestPackets() {
			return true
		}
		chain, err := q.Pop()
		if err != nil {
			continue // malformed chain: its head is consumed, skip it
		}
		if chain == nil {
			return false
		}
		w.txPacket(chain)
		if q.Push(chain, 0) == nil {
			w.pushed[txQueue] = true
		}
	}
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

// shutdown stops the worker and everything it started, and waits for it:
// the worker goroutine first (so the muxer is free), then every host socket,
// then the socket goroutines.
func (w *worker) shutdown() {
	close(w.stop)
	<-w.done
	w.host.cancel()
	w.mux.closeAll()
	w.host.wg.Wait()
}

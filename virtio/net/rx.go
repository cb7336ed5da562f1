package net

import (
	"errors"

	"github.com/smolvm/smol/virtio"
)

// rxState is the worker's receive side between calls.
type rxState struct {
	// spill catches whatever part of a frame does not fit the first
	// receive chain; one byte longer than MaxPacketLen so that a full read
	// reveals a frame that was too long (the backend truncates).
	spill []byte
	// held is a receive chain popped for a read that found no frame (or a
	// frame that was dropped): the next read uses it first. Chains cannot
	// be handed back to the avail ring, so the device keeps it.
	held *virtio.Chain
	// pending is a frame read whose tail (in spill) waits for more receive
	// chains (VIRTIO_NET_F_MRG_RXBUF).
	pending *pendingFrame
	rxBufs  [][]byte // reused scatter list
}

// pendingFrame is a received frame spread over several chains.
type pendingFrame struct {
	header Header
	chains []*virtio.Chain
	lens   []uint32 // bytes of the frame in each chain
	rest   []byte   // the part not yet placed, in spill
	frame  uint64   // frame length without the header
}

// processRx delivers frames from the backend into receive chains, up to
// rxBudget, and reports whether more may be waiting. It stops reading the
// backend when the driver has no receive buffers: the next rx notification
// restarts it (back-pressure; the backend queues or drops meanwhile).
func (w *worker) processRx() bool {
	defer w.interrupt(w.rx, RxQueue)
	for range rxBudget {
		if w.pending != nil && !w.finishPending() {
			w.stats.rxNoBuffers.Add(1)
			return false
		}
		chain := w.nextRxChain()
		if chain == nil {
			w.stats.rxNoBuffers.Add(1)
			return false
		}
		bufs, ok := w.rxSegments(chain)
		if !ok {
			w.stats.malformed.Add(1)
			w.pushRx(chain, 0)
			continue
		}
		n, err := w.backend.ReadPacket(bufs)
		if err != nil {
			w.held = chain
			if errors.Is(err, ErrNoPacket) {
				w.armWaiter(0)
			} else {
				w.stats.backendErrors.Add(1)
				w.armWaiter(backendRetryDelay)
			}
			return false
		}
		w.receive(chain, bufs, uint64(n))
	}
	return true
}

// nextRxChain returns the chain to receive into: the held one, or the next
// the driver made available. Chains too small for the header are returned
// to the driver empty (the spec requires room for it in every buffer).
func (w *worker) nextRxChain() *virtio.Chain {
	if c := w.held; c != nil {
		w.held = nil
		return c
	}
	for {
		c, err := w.rx.Pop()
		if err != nil {
			w.stats.malformed.Add(1)
			if errors.Is(err, virtio.ErrQueueBroken) {
				return nil
			}
			continue
		}
		if c == nil {
			return nil
		}
		if c.WritableLen() < HeaderSize {
			w.stats.malformed.Add(1)
			w.pushRx(c, 0)
			continue
		}
		return c
	}
}

// rxSegments is the read's scatter list: the chain's writable buffers, then
// spill. It fails for chains with more buffers than readv accepts.
func (w *worker) rxSegments(chain *virtio.Chain) ([][]byte, bool) {
	writable := chain.Writable()
	if len(writable)+1 > maxSegments {
		return nil, false
	}
	bufs := w.rxBufs[:0]
	for _, b := range writable {
		s, err := w.mem.Slice(b.Addr, uint64(b.Len))
		if err != nil { // Pop checked the range; never expected
			return nil, false
		}
		bufs = append(bufs, s)
	}
	bufs = append(bufs, w.spill)
	w.rxBufs = bufs[:0]
	return bufs, true
}

// receive completes a read of n bytes (header included) into bufs: chain's
// buffers and, where the frame did not fit, spill.
func (w *worker) receive(chain *virtio.Chain, bufs [][]byte, n uint64) {
	capacity := chain.WritableLen()
	if n >= capacity+uint64(len(w.spill)) || n > MaxPacketLen || n < HeaderSize {
		// Truncated by the backend (too long) or not even a header.
		w.dropRx(chain)
		return
	}
	var hdr [HeaderSize]byte
	readPrefix(bufs, hdr[:]) // capacity >= HeaderSize: the header is in the chain
	h, _ := ParseHeader(hdr[:])
	h, err := fixRxHeader(h, int(n-HeaderSize), w.features)
	if err != nil {
		w.dropRx(chain)
		return
	}
	if n <= capacity {
		h.NumBuffers = 1
		w.writeHeader(chain, h)
		w.pushRx(chain, uint32(n))
		w.countRx(n)
		return
	}
	if w.features&FeatureMrgRxBuf == 0 {
		// The driver promised buffers big enough for what it accepts;
		// this frame is not, so it cannot have it.
		w.dropRx(chain)
		return
	}
	w.pending = &pendingFrame{
		header: h,
		chains: []*virtio.Chain{chain},
		lens:   []uint32{uint32(capacity)},
		rest:   w.spill[:n-capacity],
		frame:  n - HeaderSize,
	}
	w.finishPending()
}

// finishPending places the rest of the pending frame into further receive
// chains and, once it all fits, publishes them together with num_buffers
// set. It reports false when the driver ran out of chains first.
func (w *worker) finishPending() bool {
	p := w.pending
	for len(p.rest) > 0 {
		c := w.nextRxChain()
		if c == nil {
			return false
		}
		k, _ := c.NewWriter().Write(p.rest) // a short write just means "next chain"
		p.rest = p.rest[k:]
		p.chains = append(p.chains, c)
		p.lens = append(p.lens, uint32(k))
	}
	p.header.NumBuffers = uint16(len(p.chains)) // at most MaxPacketLen/HeaderSize chains
	w.writeHeader(p.chains[0], p.header)
	// The chains go on the used ring back to back, as the driver expects
	// of one frame's buffers.
	for i, c := range p.chains {
		w.pushRx(c, p.lens[i])
	}
	w.countRx(p.frame + HeaderSize)
	w.pending = nil
	return true
}

// writeHeader stores h at the start of chain's writable buffers.
func (w *worker) writeHeader(chain *virtio.Chain, h Header) {
	var b [HeaderSize]byte
	h.Put(b[:])
	chain.NewWriter().Write(b[:]) // WritableLen >= HeaderSize: checked when popped
}

// dropRx discards the frame just read and keeps the chain for the next one.
func (w *worker) dropRx(chain *virtio.Chain) {
	w.stats.rxDropped.Add(1)
	w.held = chain
}

func (w *worker) pushRx(chain *virtio.Chain, written uint32) {
	if err := w.rx.Push(chain, written); err != nil {
		w.stats.malformed.Add(1)
	}
}

func (w *worker) countRx(n uint64) {
	w.stats.rxFrames.Add(1)
	w.stats.rxBytes.Add(n - HeaderSize)
}

// readPrefix copies the first len(dst) bytes of bufs into dst.
func readPrefix(bufs [][]byte, dst []byte) {
	for _, b := range bufs {
		if len(dst) == 0 {
			return
		}
		dst = dst[copy(dst, b):]
	}
}

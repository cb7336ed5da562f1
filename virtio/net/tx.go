package net

import (
	"errors"
	"io"

	"github.com/smolvm/smol/virtio"
)

// processTx sends the frames the driver made available, up to txBudget,
// and reports whether more may be waiting.
func (w *worker) processTx() bool {
	defer w.interrupt(w.tx, TxQueue)
	for range txBudget {
		chain, err := w.tx.Pop()
		if err != nil {
			// The queue consumed the bad head; there is nothing to
			// return to the driver.
			w.stats.malformed.Add(1)
			if errors.Is(err, virtio.ErrQueueBroken) {
				return false
			}
			continue
		}
		if chain == nil {
			return false
		}
		w.transmit(chain)
		// Transmit chains are read-only for the device: used length 0.
		if err := w.tx.Push(chain, 0); err != nil {
			w.stats.malformed.Add(1)
		}
	}
	return true
}

// transmit validates one frame and hands it to the backend: a private copy
// of its header (so the guest cannot change the header after the check)
// followed by the guest's buffers, unchanged and uncopied.
func (w *worker) transmit(chain *virtio.Chain) {
	total := chain.ReadableLen()
	if total < HeaderSize || total > MaxPacketLen {
		w.stats.txDropped.Add(1)
		return
	}
	r := chain.NewReader()
	if _, err := io.ReadFull(r, w.txHeader[:]); err != nil {
		w.stats.txDropped.Add(1)
		return
	}
	h, _ := ParseHeader(w.txHeader[:]) // cannot fail: HeaderSize bytes
	if err := checkTxHeader(h, int(total-HeaderSize), w.features, w.mtu); err != nil {
		w.stats.txDropped.Add(1)
		return
	}
	bufs, ok := w.txSegments(chain)
	if !ok {
		w.stats.txDropped.Add(1)
		return
	}
	if _, err := w.backend.WritePacket(bufs); err != nil {
		w.stats.backendErrors.Add(1)
		return
	}
	w.stats.txFrames.Add(1)
	w.stats.txBytes.Add(total - HeaderSize)
}

// txSegments builds the scatter-gather list: the header copy, then the
// chain's readable bytes after its header. It fails for chains with more
// buffers than writev accepts.
func (w *worker) txSegments(chain *virtio.Chain) ([][]byte, bool) {
	bufs := append(w.txBufs[:0], w.txHeader[:])
	skip := uint64(HeaderSize)
	for _, b := range chain.Readable() {
		n := uint64(b.Len)
		if skip >= n {
			skip -= n
			continue
		}
		if len(bufs) == maxSegments {
			return nil, false
		}
		s, err := w.mem.Slice(b.Addr+skip, n-skip)
		if err != nil { // Pop checked the range; never expected
			return nil, false
		}
		bufs = append(bufs, s)
		skip = 0
	}
	w.txBufs = bufs[:0]
	return bufs, true
}

package ninep

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/smolvm/smol/virtio"
)

// bridge carries 9P messages between the virtqueue, where each request
// is one descriptor chain (the T-message in its readable buffers, room
// for the R-message in its writable ones), and the 9P server, which reads
// requests from a stream and writes replies to one, tagged, in any order.
//
// It moves each message once and hands over once each way. The worker
// checks a request's framing and queues the chain (inbox); the server's
// reading goroutine takes the bytes straight out of guest memory. The
// server's reply goes straight into its chain's writable buffers as the
// server writes it (Write); only the finished chain goes back to the
// worker, which completes it (several at once when they pile up). A hand-off costs more than a copy in a
// guest whose host is itself a VM, and the guest waits for each reply
// of a sequential read or write.
type bridge struct {
	in      *inbox
	replied chan struct{} // finished has grown (capacity 1)
	done    chan struct{}
	once    sync.Once

	mu       sync.Mutex
	closed   bool
	pending  map[uint16]*virtio.Chain // requests by tag, until their reply
	finished []completion             // replies written, for the worker to complete

	// The reply being written (the server writes one at a time).
	header  []byte              // its first bytes, until the header is whole
	out     *virtio.ChainWriter // its chain's writer; nil for a flushed tag
	outTo   *virtio.Chain
	left    uint32 // bytes of it still to come
	tooLong bool   // it did not fit its chain
}

// completion is a reply written into its chain: Complete it with written.
type completion struct {
	chain   *virtio.Chain
	written uint32
}

// headerLen is a 9P message's header: size[4] type[1] tag[2].
const headerLen = 7

func newBridge() *bridge {
	done := make(chan struct{})
	return &bridge{
		in:      &inbox{queue: make(chan request, QueueSize), done: done},
		replied: make(chan struct{}, 1),
		done:    done,
		pending: map[uint16]*virtio.Chain{},
	}
}

// close ends the session: the server reads EOF, and replies still being
// written are dropped (guest memory is not touched after close returns).
func (b *bridge) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.once.Do(func() { close(b.done) })
}

// serve runs on the worker: requests from the queue go to the server,
// finished replies are completed.
func (b *bridge) serve(life *virtio.Worker) {
	q := life.Queues[0]
	for {
		switch life.Next(life.Wake(0), b.replied, nil) {
		case -1:
			return
		case 0:
			if !b.take(life, q) {
				return
			}
		case 1:
			b.complete(life, q)
		}
	}
}

// complete hands every finished reply's chain back to the guest.
func (b *bridge) complete(life *virtio.Worker, q *virtio.Queue) {
	b.mu.Lock()
	done := b.finished
	b.finished = nil
	b.mu.Unlock()
	for _, c := range done {
		if err := q.Complete(c.chain, c.written, life.Interrupt, 0); err != nil {
			slog.Warn("virtio-9p: complete request", "err", err)
		}
	}
}

// take passes every available request to the server.
func (b *bridge) take(life *virtio.Worker, q *virtio.Queue) bool {
	for !life.Interrupted() {
		c, err := q.Pop()
		if errors.Is(err, virtio.ErrMalformed) {
			continue
		}
		if err != nil {
			return false
		}
		if c == nil {
			return true
		}
		req, tag, err := newRequest(c)
		if err != nil {
			slog.Debug("virtio-9p: dropping a malformed request", "err", err)
			q.Complete(c, 0, life.Interrupt, 0)
			continue
		}
		b.mu.Lock()
		if _, busy := b.pending[tag]; busy {
			b.mu.Unlock()
			q.Complete(c, 0, life.Interrupt, 0) // a tag already in flight: not a valid request
			continue
		}
		b.pending[tag] = c
		b.mu.Unlock()
		// Never blocks: a request is queued here at most once per chain
		// the guest has outstanding, and the queue has room for all.
		select {
		case b.in.queue <- req:
		case <-b.done:
			return false
		}
	}
	return true
}

// request is one T-message on its way to the server: the header as the
// worker checked it, and the rest still in guest memory.
type request struct {
	header [headerLen]byte
	sent   int // header bytes the server has read
	body   *virtio.ChainReader
	left   uint64 // body bytes the server has not read
}

// newRequest reads a chain's header and checks its framing: the stream
// the server reads must never lose its place, so the size the server
// sees is the one checked here, and exactly that many bytes follow.
func newRequest(c *virtio.Chain) (request, uint16, error) {
	n := c.ReadableLen()
	if n < headerLen || n > MaxMessage+4096 {
		return request{}, 0, fmt.Errorf("a request of %d bytes", n)
	}
	r := request{body: c.NewReader(), left: n - headerLen}
	if _, err := io.ReadFull(r.body, r.header[:]); err != nil {
		return request{}, 0, err
	}
	if size := binary.LittleEndian.Uint32(r.header[:]); uint64(size) != n {
		return request{}, 0, fmt.Errorf("a request saying %d bytes in %d", size, n)
	}
	return r, binary.LittleEndian.Uint16(r.header[5:]), nil
}

// inbox is the stream the server reads: the queued requests, one after
// another. Only one server goroutine reads at a time (it holds its
// receive lock across a message).
type inbox struct {
	queue chan request
	done  <-chan struct{}
	cur   request
}

func (in *inbox) Read(p []byte) (int, error) {
	for in.cur.sent == headerLen && in.cur.left == 0 || in.cur.body == nil {
		select {
		case in.cur = <-in.queue:
		case <-in.done:
			return 0, io.EOF
		}
	}
	if in.cur.sent < headerLen {
		n := copy(p, in.cur.header[in.cur.sent:])
		in.cur.sent += n
		return n, nil
	}
	p = p[:min(uint64(len(p)), in.cur.left)]
	n, err := in.cur.body.Read(p)
	if err != nil && n == 0 {
		// The chain held these bytes when it was popped; a guest that
		// took them away since gets zeros, and the stream its place.
		clear(p)
		n = len(p)
	}
	in.cur.left -= uint64(n)
	return n, nil
}

// Close implements io.Closer for the server's side of the stream.
func (in *inbox) Close() error { return nil }

// Write implements io.Writer for the server: the bytes of its replies,
// in order, one reply after another (it holds its send lock across a
// reply). Each goes into the writable buffers of the chain its tag names;
// a finished one is queued for the worker to complete.
func (b *bridge) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	total := len(p)
	for len(p) > 0 {
		if b.left == 0 { // between replies, or inside a header
			n := min(headerLen-len(b.header), len(p))
			b.header = append(b.header, p[:n]...)
			p = p[n:]
			if len(b.header) < headerLen {
				break
			}
			if err := b.startReply(); err != nil {
				return 0, err
			}
		} else {
			n := min(int(b.left), len(p))
			b.emit(p[:n])
			p = p[n:]
			b.left -= uint32(n)
		}
		if b.left == 0 {
			b.finishReply()
		}
	}
	return total, nil
}

// Close implements io.Closer for the server's side of the replies.
func (b *bridge) Close() error { return nil }

// startReply reads a whole header: the reply's size and its chain.
func (b *bridge) startReply() error {
	size := binary.LittleEndian.Uint32(b.header)
	if size < headerLen || size > MaxMessage+4096 {
		return fmt.Errorf("virtio-9p: the server wrote a %d-byte message", size)
	}
	tag := binary.LittleEndian.Uint16(b.header[5:])
	b.outTo, b.out = b.pending[tag], nil // nil: a reply to a flushed request
	delete(b.pending, tag)
	if b.outTo != nil {
		b.out = b.outTo.NewWriter()
	}
	b.left = size - headerLen
	b.emit(b.header)
	b.header = b.header[:0]
	return nil
}

// emit writes reply bytes into the chain, as many as fit.
func (b *bridge) emit(p []byte) {
	if b.out == nil || b.tooLong {
		return
	}
	if _, err := b.out.Write(p); err != nil {
		b.tooLong = true
		slog.Debug("virtio-9p: reply does not fit its request", "err", err)
	}
}

// finishReply queues the written chain for the worker and makes ready for
// the next reply; mu held.
func (b *bridge) finishReply() {
	if b.outTo != nil {
		b.finished = append(b.finished, completion{b.outTo, b.out.Written()})
		select {
		case b.replied <- struct{}{}:
		default: // the worker has yet to look: it will see this one too
		}
	}
	b.out, b.outTo, b.tooLong = nil, nil, false
}

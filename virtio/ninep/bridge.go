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
// Neither direction has a buffer of its own: the server reads each
// T-message straight out of its chain, and writes each R-message straight
// into the chain of its tag. A 512 KiB Tread or Twrite is then copied
// once between guest memory and the server's buffer; a staging buffer
// would double that, and in a nested box every byte copied is emulated.
//
// Guest memory is touched by the server's goroutines only under mem: not
// at all after close (they outlive the worker, and the memory they would
// read or write may be unmapped once the device is reset), and not while
// the device is paused (the worker holds mem while it is parked, so that
// a paused device changes no guest memory, as virtio.Lifecycle promises
// snapshots and forks; a server goroutine in the middle of a reply waits
// there until the resume).
type bridge struct {
	requests chan *request   // checked requests, in the queue's order
	replies  chan completion // whole replies, for the worker to complete
	done     chan struct{}   // closed by close
	once     sync.Once

	mem    sync.RWMutex // read-held while guest memory is touched; held by a parked worker
	closed bool         // under mem, written

	mu      sync.Mutex
	pending map[uint16]*virtio.Chain // requests the server has, by tag

	// The request the server is reading (one reader at a time: the
	// server's receive lock).
	reading *request

	// The reply the server is writing (one writer at a time: the
	// server's send lock).
	head    [headerSize]byte    // size[4] type[1] tag[2]
	headLen int                 // how much of head has been written
	left    int                 // bytes of the reply after head still to come
	chain   *virtio.Chain       // where the reply goes; nil: dropped
	out     *virtio.ChainWriter // writer into chain
	full    bool                // the reply outgrew chain: the rest is dropped
}

// headerSize is a 9P message's size[4] type[1] tag[2].
const headerSize = 7

// request is one T-message on its way to the server: its header checked
// and copied by the worker, the rest read from guest memory.
type request struct {
	head [headerSize]byte
	off  int                 // bytes of head already read
	rest *virtio.ChainReader // the message after its header
	left uint64              // bytes of rest still to read
}

// completion is a chain holding its whole reply.
type completion struct {
	chain   *virtio.Chain
	written uint32
}

func newBridge() *bridge {
	return &bridge{
		requests: make(chan *request, QueueSize),
		replies:  make(chan completion, QueueSize),
		done:     make(chan struct{}),
		pending:  map[uint16]*virtio.Chain{},
	}
}

// close ends the session: the server reads EOF, replies still being
// written are dropped, and guest memory is not touched once close
// returns.
func (b *bridge) close() {
	b.once.Do(func() { close(b.done) })
	b.mem.Lock()
	b.closed = true
	b.mem.Unlock()
}

// serve runs on the worker: requests from the queue go to the server,
// replies back into the used ring.
func (b *bridge) serve(life *virtio.Worker) {
	q := life.Queues[0]
	for {
		select {
		case <-life.Stop():
			return
		case <-life.Pausing():
			b.mem.Lock()
			resumed := life.Park()
			b.mem.Unlock()
			if !resumed {
				return
			}
		case <-life.Wake(0):
			if !b.take(life, q) {
				return
			}
		case c := <-b.replies:
			b.complete(life, q, c)
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
		r, tag, err := newRequest(c)
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
		if !b.hand(life, q, r) {
			return false
		}
	}
	return true
}

// hand queues a request for the server. There is room for every chain
// the queue holds, but a hostile driver can offer a head again before it
// was answered; then this waits for the server, completing replies
// meanwhile so that the server never waits on the worker in turn.
func (b *bridge) hand(life *virtio.Worker, q *virtio.Queue, r *request) bool {
	for {
		select {
		case b.requests <- r:
			return true
		case c := <-b.replies:
			b.complete(life, q, c)
		case <-life.Stop():
			return false
		}
	}
}

// complete puts a reply's chain in the used ring.
func (b *bridge) complete(life *virtio.Worker, q *virtio.Queue, c completion) {
	if err := q.Complete(c.chain, c.written, life.Interrupt, 0); err != nil {
		slog.Warn("virtio-9p: complete request", "err", err)
	}
}

// newRequest copies a chain's header and checks its framing: the stream
// the server reads must never lose its place, so the size the server
// will read is the one checked here against the chain, whatever the
// guest writes into its buffers later.
func newRequest(c *virtio.Chain) (*request, uint16, error) {
	n := c.ReadableLen()
	if n < headerSize || n > MaxMessage+4096 {
		return nil, 0, fmt.Errorf("a request of %d bytes", n)
	}
	r := &request{rest: c.NewReader(), left: n - headerSize}
	if _, err := io.ReadFull(r.rest, r.head[:]); err != nil {
		return nil, 0, err
	}
	if size := binary.LittleEndian.Uint32(r.head[:]); uint64(size) != n {
		return nil, 0, fmt.Errorf("a request saying %d bytes in %d", size, n)
	}
	return r, binary.LittleEndian.Uint16(r.head[5:]), nil
}

// Read implements io.Reader for the server: the stream of T-messages,
// each header from the worker's checked copy and the rest from guest
// memory.
func (b *bridge) Read(p []byte) (int, error) {
	if b.reading == nil {
		select {
		case r := <-b.requests:
			b.reading = r
		case <-b.done:
			return 0, io.EOF
		}
	}
	r := b.reading
	n := copy(p, r.head[r.off:])
	r.off += n
	if k := min(uint64(len(p)-n), r.left); k > 0 {
		b.mem.RLock()
		if b.closed {
			b.mem.RUnlock()
			return n, io.EOF
		}
		got, err := io.ReadFull(r.rest, p[n:n+int(k)])
		b.mem.RUnlock()
		if err != nil {
			// The buffers' length was checked: they can fail only by
			// leaving guest memory. Zeros keep the stream's framing;
			// the server answers the message as malformed.
			clear(p[n+got : n+int(k)])
		}
		n += int(k)
		r.left -= k
	}
	if r.off == len(r.head) && r.left == 0 {
		b.reading = nil
	}
	return n, nil
}

// Write implements io.Writer for the server: it follows the reply stream
// (size[4] type[1] tag[2] ...), writes each reply into the chain of its
// tag, and hands the chain to the worker once the reply is whole. The
// server writes a reply in two or three pieces; any other cut works as
// well.
func (b *bridge) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if b.headLen < len(b.head) {
			k := copy(b.head[b.headLen:], p)
			b.headLen += k
			p = p[k:]
			if b.headLen < len(b.head) {
				break
			}
			if err := b.startReply(); err != nil {
				return 0, err
			}
		} else {
			k := min(b.left, len(p))
			if err := b.copyOut(p[:k]); err != nil {
				return 0, err
			}
			b.left -= k
			p = p[k:]
		}
		if b.headLen == len(b.head) && b.left == 0 {
			if err := b.finishReply(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// startReply takes the chain of a reply whose header is whole and writes
// the header into it.
func (b *bridge) startReply() error {
	size := int(binary.LittleEndian.Uint32(b.head[:]))
	if size < len(b.head) || size > MaxMessage+4096 {
		return fmt.Errorf("virtio-9p: the server wrote a %d-byte message", size)
	}
	tag := binary.LittleEndian.Uint16(b.head[5:])
	b.mu.Lock()
	b.chain = b.pending[tag] // nil: a reply to a flushed request, dropped
	delete(b.pending, tag)
	b.mu.Unlock()
	b.left, b.out, b.full = size-len(b.head), nil, false
	if b.chain != nil {
		b.out = b.chain.NewWriter()
	}
	return b.copyOut(b.head[:])
}

// copyOut writes part of the current reply into its chain. A reply that
// does not fit keeps what fitted, as the driver's buffers asked.
func (b *bridge) copyOut(p []byte) error {
	if b.out == nil || b.full {
		return nil
	}
	b.mem.RLock()
	defer b.mem.RUnlock()
	if b.closed {
		return io.ErrClosedPipe
	}
	if _, err := b.out.Write(p); err != nil {
		slog.Debug("virtio-9p: reply does not fit its request", "err", err)
		b.full = true
	}
	return nil
}

// finishReply hands a whole reply's chain to the worker.
func (b *bridge) finishReply() error {
	b.headLen = 0
	c := b.chain
	b.chain = nil
	if c == nil {
		return nil
	}
	select {
	case b.replies <- completion{c, b.out.Written()}:
		return nil
	case <-b.done:
		return io.ErrClosedPipe
	}
}

// Close implements io.Closer for the server's side.
func (b *bridge) Close() error { return nil }

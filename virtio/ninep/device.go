package ninep

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hugelgupf/p9/p9"
	"github.com/smolvm/smol/virtio"
)

// Device type and feature bits (virtio 1.2, section 5.3).
const (
	ID              virtio.DeviceID = 9
	featureMountTag                 = 1 << 0
)

// QueueSize is the size of the request queue.
const QueueSize = 128

// MaxMessage bounds one 9P message either way (the guest's msize may not
// be larger: the server answers Tversion with at most this).
const MaxMessage = 1 << 20

// MaxTag is the longest mount tag (the guest mounts the tree by it).
const MaxTag = 64

// Device is a virtio-9p device serving one host directory (9P2000.L).
type Device struct {
	*virtio.Lifecycle
	tag  string
	tree *tree
}

var _ virtio.Device = (*Device)(nil)

// New serves the host directory dir to the guest, which mounts it by tag
// (mount -t 9p -o trans=virtio TAG DIR); readOnly refuses every change on
// the host side.
func New(dir, tag string, readOnly bool) (*Device, error) {
	if tag == "" || len(tag) > MaxTag {
		return nil, fmt.Errorf("virtio-9p: a mount tag of 1 to %d bytes, not %q", MaxTag, tag)
	}
	t, err := newTree(dir, readOnly)
	if err != nil {
		return nil, err
	}
	return &Device{Lifecycle: virtio.NewLifecycle("virtio-9p", 1), tag: tag, tree: t}, nil
}

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return ID }

// Tag is the mount tag.
func (d *Device) Tag() string { return d.tag }

// Features implements virtio.Device.
func (d *Device) Features() uint64 { return featureMountTag }

// QueueSizes implements virtio.Device.
func (d *Device) QueueSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig implements virtio.Device: le16 tag length, then the tag.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	cfg := binary.LittleEndian.AppendUint16(nil, uint16(len(d.tag)))
	cfg = append(cfg, d.tag...)
	for i := range data {
		data[i] = 0
		if o := offset + uint64(i); o < uint64(len(cfg)) {
			data[i] = cfg[o]
		}
	}
}

// WriteConfig implements virtio.Device: the config space is read-only.
func (d *Device) WriteConfig(uint64, []byte) {}

// Close releases the served directory.
func (d *Device) Close() error {
	d.Reset()
	return d.tree.root.Close()
}

// Activate implements virtio.Device: a 9P server session for this
// activation (a reset drops every fid the guest held), fed by the worker.
func (d *Device) Activate(env virtio.Env) error {
	if len(env.Queues) != 1 || env.Queues[0] == nil {
		return errors.New("virtio-9p: activate: the request queue is not enabled")
	}
	b := newBridge()
	srv := p9.NewServer(d.tree)
	go srv.Handle(b.requests, b)
	return d.Lifecycle.Activate(env, func(life *virtio.Worker) {
		defer b.close()
		b.serve(life)
	})
}

// bridge carries 9P messages between the virtqueue, where each request
// is one descriptor chain (the T-message in its readable buffers, room
// for the R-message in its writable ones), and the 9P server, which reads
// requests from a stream and writes replies to one, tagged, in any order.
type bridge struct {
	requests *io.PipeReader
	feed     *io.PipeWriter
	replies  chan []byte // whole R-messages, from the server's goroutines
	done     chan struct{}
	once     sync.Once

	request []byte // the worker's buffer for one T-message, reused

	mu      sync.Mutex
	pending map[uint16]*virtio.Chain
	partial []byte  // a reply the server is still writing
	head    [4]byte // where partial starts, until its size field is whole
}

// Large replies (Rread's data) are collected in buffers that are used
// again once the worker has copied them into their chains: a sequential
// read would otherwise allocate, zero and later collect one buffer of the
// mount's msize per request, which is most of a read's cost in a nested
// box where every fresh page of the heap is a fault.
const largeReply = 64 << 10

var replyBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, MaxMessage+4096)
	return &b
}}

// replyBuffer returns an empty buffer with room for a size-byte reply.
func replyBuffer(size int) []byte {
	if size < largeReply {
		return make([]byte, 0, size)
	}
	return (*replyBuffers.Get().(*[]byte))[:0]
}

// recycle takes back a reply's buffer once it is in guest memory.
func recycle(m []byte) {
	if cap(m) == MaxMessage+4096 {
		m = m[:0]
		replyBuffers.Put(&m)
	}
}

func newBridge() *bridge {
	r, w := io.Pipe()
	return &bridge{requests: r, feed: w, replies: make(chan []byte, QueueSize), done: make(chan struct{}), pending: map[uint16]*virtio.Chain{}}
}

// close ends the session: the server reads EOF, and replies still being
// written are dropped.
func (b *bridge) close() {
	b.once.Do(func() { close(b.done) })
	b.feed.Close()
	b.requests.Close()
}

// Write implements io.Writer for the server: it collects bytes into whole
// replies (size[4] type[1] tag[2] ...), each in a buffer of its size, and
// queues each for the worker. The server writes a reply in two or three
// pieces; any other cut works as well.
func (b *bridge) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	var done [][]byte
	for len(p) > 0 {
		if b.partial == nil {
			b.partial = b.head[:0]
		}
		if len(b.partial) < 4 { // the size field is not whole yet
			k := min(4-len(b.partial), len(p))
			b.partial = append(b.partial, p[:k]...)
			p = p[k:]
			if len(b.partial) < 4 {
				break
			}
			size := int(binary.LittleEndian.Uint32(b.partial))
			if size < 7 || size > MaxMessage+4096 {
				b.partial = nil
				b.mu.Unlock()
				return 0, fmt.Errorf("virtio-9p: the server wrote a %d-byte message", size)
			}
			b.partial = append(replyBuffer(size), b.partial...)
			continue
		}
		size := int(binary.LittleEndian.Uint32(b.partial))
		k := min(size-len(b.partial), len(p))
		b.partial = append(b.partial, p[:k]...)
		p = p[k:]
		if len(b.partial) == size {
			done = append(done, b.partial)
			b.partial = nil
		}
	}
	b.mu.Unlock()
	for _, m := range done {
		select {
		case b.replies <- m:
		case <-b.done:
			return 0, io.ErrClosedPipe
		}
	}
	return n, nil
}

// Close implements io.Closer for the server's side.
func (b *bridge) Close() error { return nil }

// serve runs on the worker: requests from the queue go to the server,
// replies back into their chains.
func (b *bridge) serve(life *virtio.Worker) {
	q := life.Queues[0]
	for {
		select {
		case <-life.Stop():
			return
		case <-life.Pausing():
			if !life.Park() {
				return
			}
		case <-life.Wake(0):
			if !b.take(life, q) {
				return
			}
		case m := <-b.replies:
			b.reply(life, q, m)
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
		msg, tag, err := b.read(c)
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
		// The server reads requests on goroutines of its own; this blocks
		// only while it is busy taking the previous one.
		if _, err := b.feed.Write(msg); err != nil {
			return false
		}
	}
	return true
}

// read copies a chain's T-message out of guest memory into the worker's
// buffer, which is free again once the server has read it from the pipe,
// and checks its framing: the stream the server reads must never lose its
// place.
func (b *bridge) read(c *virtio.Chain) ([]byte, uint16, error) {
	n := c.ReadableLen()
	if n < 7 || n > MaxMessage+4096 {
		return nil, 0, fmt.Errorf("a request of %d bytes", n)
	}
	if uint64(cap(b.request)) < n {
		b.request = make([]byte, n)
	}
	msg := b.request[:n]
	if _, err := io.ReadFull(c.NewReader(), msg); err != nil {
		return nil, 0, err
	}
	if size := binary.LittleEndian.Uint32(msg); uint64(size) != n {
		return nil, 0, fmt.Errorf("a request saying %d bytes in %d", size, n)
	}
	return msg, binary.LittleEndian.Uint16(msg[5:]), nil
}

// reply writes an R-message into the chain of its tag and completes it.
func (b *bridge) reply(life *virtio.Worker, q *virtio.Queue, m []byte) {
	tag := binary.LittleEndian.Uint16(m[5:])
	b.mu.Lock()
	c := b.pending[tag]
	delete(b.pending, tag)
	b.mu.Unlock()
	if c == nil {
		recycle(m)
		return // a reply to a flushed request
	}
	w := c.NewWriter()
	if _, err := w.Write(m); err != nil {
		slog.Debug("virtio-9p: reply does not fit its request", "tag", tag, "err", err)
	}
	recycle(m)
	if err := q.Complete(c, w.Written(), life.Interrupt, 0); err != nil {
		slog.Warn("virtio-9p: complete request", "err", err)
	}
}

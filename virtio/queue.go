package virtio

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// QueueState is everything a split virtqueue needs to resume: the geometry
// the driver configured and the device's positions in the rings. It is a
// plain value so snapshots can store it.
type QueueState struct {
	Size      uint16 // number of descriptors the driver chose (power of two)
	Ready     bool   // the driver wrote QueueReady=1
	DescAddr  uint64 // guest address of the descriptor table
	AvailAddr uint64 // guest address of the avail (driver) ring
	UsedAddr  uint64 // guest address of the used (device) ring

	NextAvail uint16 // next avail ring index the device will consume
	NextUsed  uint16 // next used ring index the device will fill
	// SignalledUsed is NextUsed when NeedsInterrupt last decided, the "old"
	// index of the EVENT_IDX interrupt test.
	SignalledUsed uint16

	EventIdx     bool // VIRTIO_F_RING_EVENT_IDX negotiated
	IndirectDesc bool // VIRTIO_F_RING_INDIRECT_DESC negotiated
	// Broken is set once the driver published an impossible avail index;
	// the queue then stays empty until reset.
	Broken bool
}

// Queue is one split virtqueue bound to guest memory.
//
// A Queue is not safe for concurrent use: exactly one device goroutine owns
// it and calls Pop, Push and NeedsInterrupt.
type Queue struct {
	mem   Memory
	state QueueState

	// Host views of the three rings, validated once in NewQueue. Guest RAM
	// is mapped for the VM's lifetime, so they stay valid.
	desc  []byte
	avail []byte
	used  []byte
}

// NewQueue binds a queue with the given state to guest memory. It is how the
// transport creates queues at DRIVER_OK and how a snapshot restores them.
// A queue that is not Ready is accepted without checks and never yields
// chains. For a ready queue, the size must be a power of two no larger than
// MaxQueueSize, the rings must be aligned as the spec requires and lie in
// guest RAM; otherwise the error wraps ErrInvalidQueue.
func NewQueue(mem Memory, state QueueState) (*Queue, error) {
	q := &Queue{mem: mem, state: state}
	if !state.Ready {
		return q, nil
	}
	n := state.Size
	if n == 0 || n&(n-1) != 0 || n > MaxQueueSize {
		return nil, fmt.Errorf("%w: size %d is not a power of two in [1, %d]", ErrInvalidQueue, n, MaxQueueSize)
	}
	var err error
	if q.desc, err = ringSlice(mem, "descriptor table", state.DescAddr, descTableBytes(n), descAlign); err != nil {
		return nil, err
	}
	if q.avail, err = ringSlice(mem, "avail ring", state.AvailAddr, availRingBytes(n), availAlign); err != nil {
		return nil, err
	}
	if q.used, err = ringSlice(mem, "used ring", state.UsedAddr, usedRingBytes(n), usedAlign); err != nil {
		return nil, err
	}
	return q, nil
}

// ringSlice returns the host view of one ring after checking its guest and
// host alignment (see the memory-ordering notes in ring.go).
func ringSlice(mem Memory, what string, addr, length uint64, align uintptr) ([]byte, error) {
	if addr%uint64(align) != 0 {
		return nil, fmt.Errorf("%w: %s at %#x is not %d-byte aligned", ErrInvalidQueue, what, addr, align)
	}
	b, err := mem.Slice(addr, length)
	if err != nil {
		return nil, fmt.Errorf("%w: %s [%#x, +%#x): %w", ErrInvalidQueue, what, addr, length, err)
	}
	if uintptr(len(b)) != uintptr(length) || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%align != 0 {
		return nil, fmt.Errorf("%w: %s at %#x is misaligned in host memory", ErrInvalidQueue, what, addr)
	}
	return b, nil
}

// State returns the queue's state for a snapshot. The owner must not be
// using the queue concurrently.
func (q *Queue) State() QueueState { return q.state }

// Size returns the number of descriptors the driver configured.
func (q *Queue) Size() uint16 { return q.state.Size }

// AvailIdx is the driver's avail index now: how many buffers it has made
// available in all. A device watches it to learn that the driver got to
// some work (vsock's reset gate).
func (q *Queue) AvailIdx() uint16 { return loadAvailIdx(q.avail) }

// Ready reports whether the driver enabled the queue.
func (q *Queue) Ready() bool { return q.state.Ready }

// Pop returns the next available descriptor chain, or (nil, nil) when the
// driver has made none available.
//
// A malformed chain returns an error wrapping ErrMalformed; its head is
// consumed, so the device simply calls Pop again (the driver loses that
// head, which only a buggy or hostile driver can cause). An avail index that
// runs more than Size entries ahead breaks the queue: Pop returns an error
// wrapping ErrMalformed and ErrQueueBroken once, then (nil, nil) until the
// queue is recreated.
//
// With EVENT_IDX, a Pop that finds the ring empty publishes avail_event so
// the driver notifies for the next buffer, then re-checks the ring: when Pop
// returns (nil, nil) a notification is guaranteed for any later buffer.
func (q *Queue) Pop() (*Chain, error) {
	if !q.state.Ready || q.state.Broken {
		return nil, nil
	}
	availIdx := loadAvailIdx(q.avail)
	if availIdx == q.state.NextAvail && q.state.EventIdx {
		q.publishAvailEvent(q.state.NextAvail)
		fullFence()
		availIdx = loadAvailIdx(q.avail)
	}
	pending := availIdx - q.state.NextAvail
	if pending == 0 {
		return nil, nil
	}
	if pending > q.state.Size {
		q.state.Broken = true
		return nil, fmt.Errorf("%w: %w: avail idx %d is %d entries ahead of %d, queue size %d",
			ErrMalformed, ErrQueueBroken, availIdx, pending, q.state.NextAvail, q.state.Size)
	}
	slot := uint64(q.state.NextAvail % q.state.Size)
	head := le16(q.avail[4+2*slot:])
	q.state.NextAvail++
	return walkChain(q.mem, q.desc, q.state.Size, head, q.state.IndirectDesc)
}

// publishAvailEvent tells the driver (EVENT_IDX) to notify once it makes
// avail ring entry idx available.
func (q *Queue) publishAvailEvent(idx uint16) {
	binary.LittleEndian.PutUint16(q.used[4+8*uint64(q.state.Size):], idx)
}

// Push puts a chain the device finished on the used ring, with the number of
// bytes it wrote into the chain's writable buffers, and publishes the new
// used index. written larger than the chain's writable length is an error:
// it would let the driver read past what the device filled.
func (q *Queue) Push(c *Chain, written uint32) error {
	if c == nil {
		return fmt.Errorf("push: nil chain")
	}
	if !q.state.Ready {
		return fmt.Errorf("push chain %d: queue is not ready", c.Head)
	}
	if c.Head >= q.state.Size {
		return fmt.Errorf("push chain %d: head out of range for queue size %d", c.Head, q.state.Size)
	}
	if uint64(written) > c.WritableLen() {
		return fmt.Errorf("push chain %d: %d bytes written exceed its %d writable bytes", c.Head, written, c.WritableLen())
	}
	slot := uint64(q.state.NextUsed % q.state.Size)
	elem := q.used[4+8*slot : 4+8*slot+8]
	binary.LittleEndian.PutUint32(elem[0:], uint32(c.Head))
	binary.LittleEndian.PutUint32(elem[4:], written)
	q.state.NextUsed++
	storeUsedIdx(q.used, 0, q.state.NextUsed)
	return nil
}

// NeedsInterrupt reports whether the driver wants a used-buffer interrupt
// for the chains pushed since the previous call, and starts a new batch.
// Without EVENT_IDX it honours VIRTQ_AVAIL_F_NO_INTERRUPT; with it, it
// applies the spec's vring_need_event test to used_event.
func (q *Queue) NeedsInterrupt() bool {
	if !q.state.Ready {
		return false
	}
	old, cur := q.state.SignalledUsed, q.state.NextUsed
	q.state.SignalledUsed = cur
	if old == cur {
		return false
	}
	// Push's used-idx store is a full fence, so these loads see what the
	// driver wrote before it read our used index.
	if q.state.EventIdx {
		usedEvent := le16(q.avail[4+2*uint64(q.state.Size):])
		return needEvent(usedEvent, cur, old)
	}
	return le16(q.avail[0:])&availFlagNoInterrupt == 0
}

// Describe says where the device and the driver stand in the rings, for a
// diagnosis of a queue that seems stuck: the driver's avail index against
// the next entry the device takes, the used index the device published,
// the driver's used_event (EVENT_IDX) or its no-interrupt flag, and the
// avail_event the device asked to be notified at. Only the owning goroutine
// may call it.
func (q *Queue) Describe() string {
	if !q.state.Ready {
		return "not ready"
	}
	s := fmt.Sprintf("avail %d taken %d used %d signalled %d",
		loadAvailIdx(q.avail), q.state.NextAvail, q.state.NextUsed, q.state.SignalledUsed)
	if q.state.EventIdx {
		return s + fmt.Sprintf(" used_event %d avail_event %d",
			le16(q.avail[4+2*uint64(q.state.Size):]), le16(q.used[4+8*uint64(q.state.Size):]))
	}
	return s + fmt.Sprintf(" avail_flags %#x", le16(q.avail[0:]))
}

// needEvent is the spec's vring_need_event: whether moving an index from old
// to cur crossed event (all arithmetic modulo 2^16).
func needEvent(event, cur, old uint16) bool {
	return cur-event-1 < cur-old
}

// Complete pushes a finished chain and, if the driver wants it, signals the
// used-buffer interrupt for queue index (the queue's position in Env.Queues).
func (q *Queue) Complete(c *Chain, written uint32, irq Interrupter, index int) error {
	if err := q.Push(c, written); err != nil {
		return err
	}
	return q.Signal(irq, index)
}

// Signal raises the used-buffer interrupt for queue index if the driver
// wants one for the chains pushed since the last call (NeedsInterrupt).
// Devices that complete a batch push each chain and call it once.
func (q *Queue) Signal(irq Interrupter, index int) error {
	if q.NeedsInterrupt() {
		if err := irq.SignalUsed(index); err != nil {
			return fmt.Errorf("signal used buffers on queue %d: %w", index, err)
		}
	}
	return nil
}

package virtio_test

import (
	"errors"
	"io"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

type D = virtiotest.Desc

const (
	fNext  = virtiotest.DescNext
	fWrite = virtiotest.DescWrite
	fInd   = virtiotest.DescIndirect
)

// Every malformed chain fails Pop with ErrMalformed, consumes its head, and
// leaves the queue usable: the next valid chain pops normally.
func TestMalformedChains(t *testing.T) {
	type env struct {
		t    *testing.T
		mem  *memory.Guest
		dq   *virtiotest.DriverQueue
		data uint64 // 4 KiB scratch buffer in RAM
	}
	table := func(e env, entries ...D) uint64 {
		addr := e.dq.Alloc(uint64(16 * len(entries)))
		for i, d := range entries {
			virtiotest.WriteTableDesc(e.t, e.mem, addr, uint16(i), d)
		}
		return addr
	}
	cases := []struct {
		name     string
		size     uint16
		indirect bool
		build    func(e env) uint16 // writes descriptors, returns the head to publish
	}{
		{name: "self loop", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 8, Flags: fNext, Next: 0})
			return 0
		}},
		{name: "two-descriptor loop", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 8, Flags: fNext, Next: 1})
			e.dq.WriteDesc(1, D{Addr: e.data, Len: 8, Flags: fNext, Next: 0})
			return 0
		}},
		{name: "loop in indirect table", indirect: true, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8, Flags: fNext, Next: 1}, D{Addr: e.data, Len: 8, Flags: fNext, Next: 0})
			e.dq.WriteDesc(0, D{Addr: tb, Len: 32, Flags: fInd})
			return 0
		}},
		{name: "next out of range", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 8, Flags: fNext, Next: 16})
			return 0
		}},
		{name: "indirect next out of table", indirect: true, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8, Flags: fNext, Next: 2}, D{Addr: e.data, Len: 8})
			e.dq.WriteDesc(0, D{Addr: tb, Len: 32, Flags: fInd})
			return 0
		}},
		{name: "address beyond RAM", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: testMemSize, Len: 8})
			return 0
		}},
		{name: "buffer straddles end of RAM", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: testMemSize - 4, Len: 8})
			return 0
		}},
		{name: "address in MMIO hole", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: memory.MMIOHoleStart, Len: 8})
			return 0
		}},
		{name: "zero length", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 0})
			return 0
		}},
		{name: "huge length", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 0xffffffff, Flags: fWrite})
			return 0
		}},
		{name: "address plus length overflows", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: ^uint64(0) - 0xf, Len: 0x100})
			return 0
		}},
		{name: "total length above 4 GiB", size: 256, build: func(e env) uint16 {
			// 256 descriptors of 16 MiB (all of RAM) add up to 2^32.
			for i := range uint16(256) {
				d := D{Addr: 0, Len: testMemSize, Flags: fNext, Next: i + 1}
				if i == 255 {
					d.Flags = 0
				}
				e.dq.WriteDesc(i, d)
			}
			return 0
		}},
		{name: "indirect inside indirect", indirect: true, build: func(e env) uint16 {
			inner := table(e, D{Addr: e.data, Len: 8})
			outer := table(e, D{Addr: inner, Len: 16, Flags: fInd})
			e.dq.WriteDesc(0, D{Addr: outer, Len: 16, Flags: fInd})
			return 0
		}},
		{name: "indirect with next", indirect: true, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8})
			e.dq.WriteDesc(0, D{Addr: tb, Len: 16, Flags: fInd | fNext, Next: 1})
			e.dq.WriteDesc(1, D{Addr: e.data, Len: 8})
			return 0
		}},
		{name: "indirect length not a multiple of 16", indirect: true, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8}, D{Addr: e.data, Len: 8})
			e.dq.WriteDesc(0, D{Addr: tb, Len: 24, Flags: fInd})
			return 0
		}},
		{name: "indirect length zero", indirect: true, build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 0, Flags: fInd})
			return 0
		}},
		{name: "indirect table beyond RAM", indirect: true, build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: testMemSize - 16, Len: 32, Flags: fInd})
			return 0
		}},
		{name: "indirect table too long", indirect: true, build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: 0, Len: 16 * (1<<16 + 1), Flags: fInd})
			return 0
		}},
		{name: "indirect not negotiated", indirect: false, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8})
			e.dq.WriteDesc(0, D{Addr: tb, Len: 16, Flags: fInd})
			return 0
		}},
		{name: "writable before readable", build: func(e env) uint16 {
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 8, Flags: fWrite | fNext, Next: 1})
			e.dq.WriteDesc(1, D{Addr: e.data + 8, Len: 8})
			return 0
		}},
		{name: "writable before readable in indirect table", indirect: true, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8, Flags: fWrite | fNext, Next: 1}, D{Addr: e.data, Len: 8})
			e.dq.WriteDesc(0, D{Addr: tb, Len: 32, Flags: fInd})
			return 0
		}},
		{name: "writable direct before readable indirect", indirect: true, build: func(e env) uint16 {
			tb := table(e, D{Addr: e.data, Len: 8})
			e.dq.WriteDesc(0, D{Addr: e.data, Len: 8, Flags: fWrite | fNext, Next: 1})
			e.dq.WriteDesc(1, D{Addr: tb, Len: 16, Flags: fInd})
			return 0
		}},
		{name: "head index equal to size", build: func(e env) uint16 { return 16 }},
		{name: "head index far beyond size", build: func(e env) uint16 { return 0xffff }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = 16
			}
			mem := newMem(t)
			dq := virtiotest.NewDriverQueue(t, mem, 0x10000, size)
			st := dq.State()
			st.IndirectDesc = tc.indirect
			q, err := virtio.NewQueue(mem, st)
			if err != nil {
				t.Fatal(err)
			}
			e := env{t: t, mem: mem, dq: dq, data: dq.Alloc(4096)}
			dq.Publish(tc.build(e))

			c, err := q.Pop()
			if !errors.Is(err, virtio.ErrMalformed) || c != nil {
				t.Fatalf("Pop = %v, %v; want nil, ErrMalformed", c, err)
			}
			t.Log(err)
			if errors.Is(err, virtio.ErrQueueBroken) {
				t.Fatalf("one bad chain broke the queue: %v", err)
			}
			// The bad head was consumed; a good chain follows.
			dq.WriteDesc(size-1, D{Addr: e.data, Len: 2})
			dq.Write(e.data, []byte("ok"))
			dq.Publish(size - 1)
			c = mustPop(t, q)
			if b, _ := io.ReadAll(c.NewReader()); string(b) != "ok" || c.Head != size-1 {
				t.Fatalf("next chain: head %d, %q", c.Head, b)
			}
		})
	}
}

func TestAvailIndexJumpBreaksQueue(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{size: 8})
	// Exactly size entries ahead is legal (a full ring).
	for range 8 {
		dq.AddChain([][]byte{[]byte("b")}, nil)
	}
	for range 8 {
		if err := q.Push(mustPop(t, q), 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(dq.Used()) != 8 {
		t.Fatal("full ring not completed")
	}
	dq.SetAvailIdx(dq.AvailIdx() + 9)
	c, err := q.Pop()
	if c != nil || !errors.Is(err, virtio.ErrMalformed) || !errors.Is(err, virtio.ErrQueueBroken) {
		t.Fatalf("Pop = %v, %v; want ErrMalformed and ErrQueueBroken", c, err)
	}
	if !q.State().Broken {
		t.Fatal("queue state not marked broken")
	}
	// A broken queue yields nothing more, so a device loop that skips
	// malformed chains cannot spin on it.
	for range 3 {
		if c, err := q.Pop(); c != nil || err != nil {
			t.Fatalf("Pop on broken queue = %v, %v", c, err)
		}
	}
}

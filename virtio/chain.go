package virtio

import "fmt"

// Buffer is one guest buffer of a descriptor chain. Its whole range lies in
// guest RAM: Pop checked it.
type Buffer struct {
	Addr uint64
	Len  uint32
}

// Chain is one descriptor chain the driver made available: its device-
// readable buffers followed by its device-writable ones. The buffer list is
// a copy taken while walking, so the driver rewriting its descriptors later
// cannot change what the device sees (the buffers' contents, of course, stay
// in guest memory).
type Chain struct {
	// Head is the index of the chain's first descriptor, which Push returns
	// to the driver.
	Head uint16

	mem           Memory
	buffers       []Buffer
	firstWritable int    // index in buffers of the first writable buffer
	readableLen   uint64 // total bytes of readable buffers
	writableLen   uint64 // total bytes of writable buffers
}

// Readable returns the device-readable buffers in chain order.
func (c *Chain) Readable() []Buffer { return c.buffers[:c.firstWritable:c.firstWritable] }

// Writable returns the device-writable buffers in chain order.
func (c *Chain) Writable() []Buffer { return c.buffers[c.firstWritable:len(c.buffers):len(c.buffers)] }

// ReadableLen returns the total length of the readable buffers.
func (c *Chain) ReadableLen() uint64 { return c.readableLen }

// WritableLen returns the total length of the writable buffers.
func (c *Chain) WritableLen() uint64 { return c.writableLen }

// Memory returns the guest memory the chain's buffers live in.
func (c *Chain) Memory() Memory { return c.mem }

// descriptor is one descriptor table entry, copied out of guest memory.
type descriptor struct {
	addr  uint64
	len   uint32
	flags uint16
	next  uint16
}

func readDescriptor(table []byte, i uint32) descriptor {
	e := table[uint64(i)*descSize : uint64(i)*descSize+descSize]
	return descriptor{addr: le64(e[0:]), len: le32(e[8:]), flags: le16(e[12:]), next: le16(e[14:])}
}

// walkChain follows the chain starting at head in the descriptor table desc
// of a queue of size queueSize, applying the rules of virtio 1.2 sections
// 2.7.5 (chains) and 2.7.5.3 (indirect descriptors):
//
//   - head and every next index must be inside the table being walked;
//   - at most queueSize descriptors are followed in the main table and at
//     most the table's entry count in an indirect table, which bounds the
//     walk and turns any loop into an error;
//   - INDIRECT needs the negotiated feature, may not be combined with NEXT,
//     may not appear inside an indirect table, and its length must be a
//     non-zero multiple of 16 no larger than 65536 entries; the WRITE flag
//     of the descriptor that points at the table is ignored;
//   - every buffer has a non-zero length and lies inside guest RAM;
//   - no readable buffer follows a writable one;
//   - the chain's total length fits in 32 bits.
func walkChain(mem Memory, desc []byte, queueSize uint16, head uint16, indirectAllowed bool) (*Chain, error) {
	c := &Chain{Head: head, mem: mem}
	bad := func(format string, args ...any) (*Chain, error) {
		return nil, fmt.Errorf("%w: chain at head %d: %s", ErrMalformed, head, fmt.Sprintf(format, args...))
	}
	if head >= queueSize {
		return bad("head index out of range for queue size %d", queueSize)
	}

	table := desc
	entries := uint32(queueSize)
	limit := uint32(queueSize) // descriptors we may still follow in this table
	inIndirect := false
	seenWritable := false
	i := uint32(head)
	for {
		if limit == 0 {
			if inIndirect {
				return bad("indirect table of %d entries loops", entries)
			}
			return bad("more than %d descriptors: loop", queueSize)
		}
		limit--
		d := readDescriptor(table, i)

		if d.flags&descFlagIndirect != 0 {
			switch {
			case !indirectAllowed:
				return bad("descriptor %d is indirect but VIRTIO_F_RING_INDIRECT_DESC was not negotiated", i)
			case inIndirect:
				return bad("indirect descriptor %d inside an indirect table", i)
			case d.flags&descFlagNext != 0:
				return bad("indirect descriptor %d also has NEXT", i)
			case d.len == 0 || d.len%descSize != 0:
				return bad("indirect table length %d is not a non-zero multiple of %d", d.len, descSize)
			case d.len/descSize > maxIndirectEntries:
				return bad("indirect table of %d entries exceeds %d", d.len/descSize, maxIndirectEntries)
			}
			t, err := mem.Slice(d.addr, uint64(d.len))
			if err != nil {
				return bad("indirect table: %v", err)
			}
			table = t
			entries = d.len / descSize
			limit = entries
			inIndirect = true
			i = 0
			continue
		}

		if d.len == 0 {
			return bad("descriptor %d has zero length", i)
		}
		if _, err := mem.Slice(d.addr, uint64(d.len)); err != nil {
			return bad("descriptor %d buffer: %v", i, err)
		}
		if c.readableLen+c.writableLen+uint64(d.len) > maxChainBytes {
			return bad("total length exceeds %d bytes", uint64(maxChainBytes))
		}
		if d.flags&descFlagWrite != 0 {
			seenWritable = true
			c.writableLen += uint64(d.len)
		} else {
			if seenWritable {
				return bad("readable descriptor %d after a writable one", i)
			}
			c.readableLen += uint64(d.len)
			c.firstWritable++
		}
		c.buffers = append(c.buffers, Buffer{Addr: d.addr, Len: d.len})

		if d.flags&descFlagNext == 0 {
			return c, nil
		}
		if uint32(d.next) >= entries {
			return bad("descriptor %d: next %d out of range for a table of %d", i, d.next, entries)
		}
		i = uint32(d.next)
	}
}

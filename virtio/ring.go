package virtio

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Split virtqueue layout (virtio 1.2, section 2.7).
const (
	// MaxQueueSize is the largest split virtqueue the spec allows.
	MaxQueueSize = 32768

	descSize = 16 // addr u64, len u32, flags u16, next u16

	descFlagNext     = 1
	descFlagWrite    = 2
	descFlagIndirect = 4

	// availFlagNoInterrupt is the driver asking for no used-buffer
	// interrupts (ignored by the device once EVENT_IDX is negotiated).
	availFlagNoInterrupt = 1

	// Ring alignment the spec requires of the driver (2.7, table).
	descAlign  = 16
	availAlign = 2
	usedAlign  = 4

	// maxIndirectEntries bounds an indirect table: "next" is 16 bits wide,
	// so no chain can reach further than entry 65535.
	maxIndirectEntries = 1 << 16

	// maxChainBytes bounds a chain's total length ("the driver MUST NOT add
	// a descriptor chain longer than 2^32 bytes in total"); a device counts
	// written bytes in a uint32, so one byte less is the useful maximum.
	maxChainBytes = 1<<32 - 1
)

// Ring sizes in bytes for a queue of size n, including the event-index
// fields, which always take their space whether or not EVENT_IDX is used.
func descTableBytes(n uint16) uint64 { return descSize * uint64(n) }
func availRingBytes(n uint16) uint64 { return 6 + 2*uint64(n) }
func usedRingBytes(n uint16) uint64  { return 6 + 8*uint64(n) }

// Memory ordering.
//
// The driver runs on another CPU and shares the rings with us through guest
// RAM, which Go's memory model knows nothing about. The two orderings the
// split-ring protocol relies on are:
//
//   - the device reads avail->idx, then the ring entries and descriptors it
//     covers (acquire), and
//   - the device writes the used element, then used->idx (release), and after
//     publishing used->idx or avail_event re-reads the driver's
//     used_event / avail->idx (a store-load fence).
//
// smol runs on amd64 only, whose TSO model keeps loads ordered with loads and
// stores with stores; the compiler must not reorder them either, and a
// store-load pair needs a full fence. The ring index words are therefore
// accessed with sync/atomic (compiler barriers; the 32-bit store is an XCHG,
// a full fence on amd64). sync/atomic has no 16-bit operations, so each
// 16-bit index is accessed through the naturally aligned 32-bit word that
// contains it:
//
//   - avail->idx sits at avail+2; the word is at avail+2 when that is 4-byte
//     aligned (idx in the low half), else at avail+0 (idx in the high half).
//     Both words lie inside the avail ring, so the load touches nothing else.
//   - used->flags and used->idx form the word at used+0 (4-byte aligned by
//     spec). The device owns both fields, so it stores the whole word.
//
// Ring slices alias guest RAM, which the VMM maps page-aligned, so guest
// alignment equals host alignment; newQueueRings verifies the host alignment
// anyway so that a test Memory with odd alignment is refused, not misread.

// loadAvailIdx is the acquire load of avail->idx.
func loadAvailIdx(avail []byte) uint16 {
	if uintptr(unsafe.Pointer(&avail[2]))%4 == 0 {
		w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&avail[2])))
		return uint16(w) // little-endian: avail[2:4] is the low half
	}
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&avail[0])))
	return uint16(w >> 16)
}

// storeUsedIdx is the release store of used->flags and used->idx.
func storeUsedIdx(used []byte, flags, idx uint16) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&used[0])), uint32(flags)|uint32(idx)<<16)
}

// fenceWord is the target of fullFence's locked read-modify-write.
var fenceWord uint32

// fullFence orders every earlier store before every later load, as the
// device needs after publishing avail_event and before re-reading
// avail->idx. On amd64 any LOCK-prefixed instruction is a full fence.
func fullFence() { atomic.AddUint32(&fenceWord, 1) }

// le16 and le32 read little-endian fields the driver wrote; plain loads are
// fine for them because the acquire load of the index that covers them came
// first.
func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

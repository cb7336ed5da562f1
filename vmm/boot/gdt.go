package boot

import (
	"encoding/binary"
	"fmt"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/vmm/memory"
)

// Segment selectors. The 64-bit boot protocol requires __BOOT_CS = 0x10 and
// __BOOT_DS = 0x18; PVH allows any, and uses the same ones.
const (
	codeSelector = 0x10
	dataSelector = 0x18
	tssSelector  = 0x20
	gdtEntries   = 6 // null, unused, code, data, TSS (16 bytes in long mode)
)

// Descriptor access bytes and flags.
const (
	accessCode = 0x9B // present, DPL 0, code/data, execute/read, accessed
	accessData = 0x93 // present, DPL 0, code/data, read/write, accessed
	accessTSS  = 0x8B // present, DPL 0, system, busy 32/64-bit TSS

	flagGranularity = 1 << 3 // limit counts 4 KiB pages
	flagDB          = 1 << 2 // 32-bit default operand size
	flagLong        = 1 << 1 // 64-bit code segment

	tssLimit = 0x67 // a 104-byte TSS, the minimum
)

// descriptor encodes a segment descriptor: the base and 20-bit limit are
// split across the 8 bytes for historical reasons.
func descriptor(base, limit uint32, access, flags uint8) uint64 {
	return uint64(limit&0xffff) |
		uint64(base&0xffffff)<<16 |
		uint64(access)<<40 |
		uint64((limit>>16)&0xf)<<48 |
		uint64(flags&0xf)<<52 |
		uint64(base>>24)<<56
}

// segmentFromDescriptor returns the hidden descriptor-cache contents the CPU
// would load for selector from desc, so that the registers KVM is given
// agree exactly with the GDT in guest memory.
func segmentFromDescriptor(selector uint16, desc uint64) kvm.Segment {
	access := uint8(desc >> 40)
	flags := uint8(desc>>52) & 0xf
	limit := uint32(desc&0xffff) | uint32((desc>>48)&0xf)<<16
	if flags&flagGranularity != 0 {
		limit = limit<<12 | 0xfff
	}
	return kvm.Segment{
		Base:     (desc>>16)&0xffffff | (desc>>56)<<24,
		Limit:    limit,
		Selector: selector,
		Type:     access & 0xf,
		S:        (access >> 4) & 1,
		DPL:      (access >> 5) & 3,
		Present:  access >> 7,
		AVL:      flags & 1,
		L:        (flags >> 1) & 1,
		DB:       (flags >> 2) & 1,
		G:        (flags >> 3) & 1,
	}
}

// gdt returns the descriptor table for a protocol: flat 4 GiB code and data
// segments, the code segment 64-bit for long mode or 32-bit for PVH.
func gdt(p Protocol) [gdtEntries]uint64 {
	codeFlags := uint8(flagGranularity | flagLong)
	if p == ProtocolPVH {
		codeFlags = flagGranularity | flagDB
	}
	var t [gdtEntries]uint64
	t[codeSelector/8] = descriptor(0, 0xfffff, accessCode, codeFlags)
	t[dataSelector/8] = descriptor(0, 0xfffff, accessData, flagGranularity|flagDB)
	t[tssSelector/8] = descriptor(0, tssLimit, accessTSS, 0)
	// t[tssSelector/8+1] is the upper half of the 16-byte long-mode TSS
	// descriptor: base bits 63:32, zero.
	return t
}

func writeGDT(mem *memory.Guest, p Protocol) error {
	t := gdt(p)
	b := make([]byte, 8*len(t))
	for i, d := range t {
		binary.LittleEndian.PutUint64(b[i*8:], d)
	}
	if _, err := mem.WriteAt(b, int64(GDTAddr)); err != nil {
		return fmt.Errorf("write GDT: %w", err)
	}
	return nil
}

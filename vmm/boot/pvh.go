package boot

import (
	"encoding/binary"
	"fmt"

	"github.com/smolvm/smol/vmm/memory"
)

// PVH boot structures (Xen's public hvm/start_info.h, which Linux's PVH
// entry reads even when it is not running on Xen).
const (
	startInfoMagic      = 0x336ec578
	startInfoVersion    = 1 // version 1 added the memory map
	startInfoSize       = 56
	modlistEntrySize    = 32
	memmapEntrySize     = 24
	maxPVHMemmapEntries = (startInfoAreaEnd - MemmapAddr) / memmapEntrySize
)

// writeStartInfo writes hvm_start_info, its module list (the initrd is
// module 0, as Linux expects) and the memory map.
func writeStartInfo(mem *memory.Guest, info bootInfo) error {
	if uint64(len(info.memoryMap)) > maxPVHMemmapEntries {
		return fmt.Errorf("PVH memory map has %d entries, room for %d", len(info.memoryMap), maxPVHMemmapEntries)
	}
	le := binary.LittleEndian
	si := make([]byte, startInfoSize)
	le.PutUint32(si[0:], startInfoMagic)
	le.PutUint32(si[4:], startInfoVersion)
	// flags (offset 8) stay 0: not a Xen privileged domain.
	if info.initrdSize != 0 {
		le.PutUint32(si[12:], 1) // nr_modules
		le.PutUint64(si[16:], ModlistAddr)
		mod := make([]byte, modlistEntrySize)
		le.PutUint64(mod[0:], info.initrdAddr)
		le.PutUint64(mod[8:], info.initrdSize)
		// cmdline_paddr (16) and reserved (24) stay 0.
		if _, err := mem.WriteAt(mod, int64(ModlistAddr)); err != nil {
			return fmt.Errorf("write PVH module list: %w", err)
		}
	}
	le.PutUint64(si[24:], info.cmdlineAddr)
	le.PutUint64(si[32:], info.rsdpAddr)
	le.PutUint64(si[40:], MemmapAddr)
	le.PutUint32(si[48:], uint32(len(info.memoryMap)))

	mm := make([]byte, memmapEntrySize*len(info.memoryMap))
	for i, e := range info.memoryMap {
		le.PutUint64(mm[i*memmapEntrySize:], e.Addr)
		le.PutUint64(mm[i*memmapEntrySize+8:], e.Size)
		le.PutUint32(mm[i*memmapEntrySize+16:], uint32(e.Type))
	}
	if _, err := mem.WriteAt(mm, int64(MemmapAddr)); err != nil {
		return fmt.Errorf("write PVH memory map: %w", err)
	}
	if _, err := mem.WriteAt(si, int64(StartInfoAddr)); err != nil {
		return fmt.Errorf("write PVH start info: %w", err)
	}
	return nil
}

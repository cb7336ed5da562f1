package boot

import (
	"encoding/binary"
	"sort"

	"github.com/smolvm/smol/vmm/memory"
)

// E820Type is the kind of a memory map entry, numbered as the BIOS e820
// call (and PVH's hvm_memmap_table_entry) number them.
type E820Type uint32

// Memory map entry types.
const (
	E820RAM      E820Type = 1
	E820Reserved E820Type = 2
)

// E820Entry is one range of the guest's physical memory map.
type E820Entry struct {
	Addr, Size uint64
	Type       E820Type
}

// e820MaxEntries is how many entries boot_params can hold
// (E820_MAX_ENTRIES_ZEROPAGE); the map built here has at most four.
const e820MaxEntries = 128

// memoryMap describes guest RAM to the kernel the way a PC BIOS would:
//
//   - [0, 0x9FC00) usable: conventional memory, holding the VMM's boot
//     structures (Linux reserves the first 1 MiB early in boot anyway);
//   - [0x9FC00, 1 MiB) reserved: on a PC the EBDA, VGA window and BIOS ROM;
//     here the ACPI tables, which must not be handed out as free memory;
//   - [1 MiB, end of low RAM) usable: the kernel, the initrd and the rest;
//   - RAM above 4 GiB, if any, usable.
//
// The MMIO hole below 4 GiB is simply absent from the map.
func memoryMap(regions []memory.Region) []E820Entry {
	m := []E820Entry{{Addr: BIOSAreaStart, Size: HighMemStart - BIOSAreaStart, Type: E820Reserved}}
	for _, r := range regions {
		if r.Size == 0 {
			continue
		}
		if r.GuestAddr < HighMemStart {
			if low := min(r.End(), BIOSAreaStart); low > r.GuestAddr {
				m = append(m, E820Entry{Addr: r.GuestAddr, Size: low - r.GuestAddr, Type: E820RAM})
			}
			if r.End() > HighMemStart {
				m = append(m, E820Entry{Addr: HighMemStart, Size: r.End() - HighMemStart, Type: E820RAM})
			}
			continue
		}
		m = append(m, E820Entry{Addr: r.GuestAddr, Size: r.Size, Type: E820RAM})
	}
	sort.Slice(m, func(i, j int) bool { return m[i].Addr < m[j].Addr })
	return m
}

// putE820 writes entries in the boot_params layout (packed, 20 bytes each:
// addr, size, type).
func putE820(b []byte, m []E820Entry) {
	for i, e := range m {
		binary.LittleEndian.PutUint64(b[i*20:], e.Addr)
		binary.LittleEndian.PutUint64(b[i*20+8:], e.Size)
		binary.LittleEndian.PutUint32(b[i*20+16:], uint32(e.Type))
	}
}

package boot

import (
	"encoding/binary"
	"fmt"

	"github.com/smolvm/smol/vmm/memory"
)

// Page table entry bits.
const (
	ptePresent  = 1 << 0
	pteWritable = 1 << 1
	ptePageSize = 1 << 7 // in a page directory entry: a 2 MiB page
)

const (
	pdEntries = 512
	hugePage  = 2 << 20
	numPDs    = identityMapSize / (pdEntries * hugePage) // one per GiB
)

// writeIdentityPageTables builds the 4-level page tables that map the first
// identityMapSize bytes of physical memory to the same virtual addresses,
// with 2 MiB pages. The 64-bit boot protocol starts the kernel in long mode,
// which cannot run without paging; the kernel replaces these tables soon
// after it starts.
//
//	CR3 -> PML4[0] -> PDPT[0..3] -> PD0..PD3, 512 x 2 MiB each
func writeIdentityPageTables(mem *memory.Guest) error {
	le := binary.LittleEndian
	pml4 := make([]byte, pageSize)
	le.PutUint64(pml4, PDPTAddr|ptePresent|pteWritable)

	pdpt := make([]byte, pageSize)
	for i := range uint64(numPDs) {
		le.PutUint64(pdpt[i*8:], (PDAddr+i*pageSize)|ptePresent|pteWritable)
	}

	pds := make([]byte, numPDs*pageSize)
	for i := range uint64(numPDs * pdEntries) {
		le.PutUint64(pds[i*8:], i*hugePage|ptePresent|pteWritable|ptePageSize)
	}

	for _, w := range []struct {
		addr uint64
		data []byte
	}{{PML4Addr, pml4}, {PDPTAddr, pdpt}, {PDAddr, pds}} {
		if _, err := mem.WriteAt(w.data, int64(w.addr)); err != nil {
			return fmt.Errorf("write page tables: %w", err)
		}
	}
	return nil
}

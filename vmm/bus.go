package vmm

import (
	"fmt"
	"sort"

	"github.com/smolvm/smol/devices"
)

// Bus maps address ranges of one address space (x86 port I/O, or guest
// physical MMIO) to the devices behind them. The same type serves both
// spaces: a device sees only offsets into its own range.
//
// A Bus is built before the vCPUs start and is read-only afterwards, which is
// why lookups need no lock.
type Bus struct {
	name    string
	entries []busEntry // sorted by base, non-overlapping
}

type busEntry struct {
	base, size uint64
	dev        devices.Device
}

// NewBus returns an empty bus; name appears in errors ("pio", "mmio").
func NewBus(name string) *Bus { return &Bus{name: name} }

// Register places dev at [base, base+size). Ranges must not overlap.
func (b *Bus) Register(base, size uint64, dev devices.Device) error {
	if size == 0 || base+size < base {
		return fmt.Errorf("%s bus: bad range [%#x, +%#x)", b.name, base, size)
	}
	i := sort.Search(len(b.entries), func(i int) bool { return b.entries[i].base >= base })
	if i > 0 && b.entries[i-1].base+b.entries[i-1].size > base {
		return fmt.Errorf("%s bus: [%#x, +%#x) overlaps [%#x, +%#x)", b.name, base, size, b.entries[i-1].base, b.entries[i-1].size)
	}
	if i < len(b.entries) && base+size > b.entries[i].base {
		return fmt.Errorf("%s bus: [%#x, +%#x) overlaps [%#x, +%#x)", b.name, base, size, b.entries[i].base, b.entries[i].size)
	}
	b.entries = append(b.entries, busEntry{})
	copy(b.entries[i+1:], b.entries[i:])
	b.entries[i] = busEntry{base: base, size: size, dev: dev}
	return nil
}

// find returns the device whose range holds all of [addr, addr+n).
func (b *Bus) find(addr, n uint64) (busEntry, bool) {
	i := sort.Search(len(b.entries), func(i int) bool { return b.entries[i].base+b.entries[i].size > addr })
	if i == len(b.entries) {
		return busEntry{}, false
	}
	e := b.entries[i]
	if addr < e.base || addr+n > e.base+e.size || addr+n < addr {
		return busEntry{}, false
	}
	return e, true
}

// Read dispatches a guest read. An access that hits no device reads as all
// ones, as an unclaimed ISA or MMIO address does on real hardware; Linux
// relies on that to find out that a device is absent. It reports whether a
// device claimed the access.
func (b *Bus) Read(addr uint64, data []byte) bool {
	e, ok := b.find(addr, uint64(len(data)))
	if !ok {
		for i := range data {
			data[i] = 0xff
		}
		return false
	}
	e.dev.Read(addr-e.base, data)
	return true
}

// Write dispatches a guest write; writes to no device are dropped.
func (b *Bus) Write(addr uint64, data []byte) bool {
	e, ok := b.find(addr, uint64(len(data)))
	if !ok {
		return false
	}
	e.dev.Write(addr-e.base, data)
	return true
}

// shifted places one register of a device elsewhere than at the device's
// base: the bus gives offsets from the register's own address, the device
// expects them from its base. It lets a device whose registers have a gap
// (the 8042's ports 0x60 and 0x64 around port B) be registered register by
// register.
type shifted struct {
	dev devices.Device
	by  uint64
}

func (s shifted) Read(offset uint64, data []byte)  { s.dev.Read(offset+s.by, data) }
func (s shifted) Write(offset uint64, data []byte) { s.dev.Write(offset+s.by, data) }

package boot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/smolvm/smol/vmm/acpi"
	"github.com/smolvm/smol/vmm/memory"
)

// Synthetic kernels: just enough structure for the loader, with payload
// bytes that are easy to recognise in guest memory.

const (
	testKernelPaddr = 0x100_0000 // 16 MiB, where a real vmlinux loads
	testKernelVaddr = 0xffff_ffff_8100_0000
	testDataOffset  = 0x1000
)

type elfSpec struct {
	class    elf.Class
	machine  elf.Machine
	paddr    uint64
	filesz   uint64
	memsz    uint64
	offset   uint64 // file offset of the segment's data
	entry    uint64
	pvh      bool
	pvhEntry uint64
}

func defaultELF() elfSpec {
	return elfSpec{
		class:    elf.ELFCLASS64,
		machine:  elf.EM_X86_64,
		paddr:    testKernelPaddr,
		filesz:   0x300,
		memsz:    0x5000,
		offset:   testDataOffset,
		entry:    testKernelPaddr + 0x100,
		pvhEntry: testKernelPaddr + 0x40,
	}
}

// payload returns the recognisable bytes stored in a segment.
func payload(n uint64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// buildELF writes a minimal ELF64 executable: one PT_LOAD and, if s.pvh,
// a PT_NOTE holding an unrelated GNU note followed by the Xen PVH note.
func buildELF(s elfSpec) []byte {
	le := binary.LittleEndian
	var notes bytes.Buffer
	if s.pvh {
		note := func(name string, typ uint32, desc []byte) {
			var h [12]byte
			le.PutUint32(h[0:], uint32(len(name)+1))
			le.PutUint32(h[4:], uint32(len(desc)))
			le.PutUint32(h[8:], typ)
			notes.Write(h[:])
			n := append([]byte(name), 0)
			for len(n)%4 != 0 {
				n = append(n, 0)
			}
			notes.Write(n)
			notes.Write(desc)
			for notes.Len()%4 != 0 {
				notes.WriteByte(0)
			}
		}
		note("GNU", 3, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
		var d [8]byte
		le.PutUint64(d[:], s.pvhEntry)
		note("Xen", 18, d[:])
	}
	phnum := 1
	if s.pvh {
		phnum = 2
	}
	f := make([]byte, s.offset+s.filesz)
	copy(f[0:], elf.ELFMAG)
	f[elf.EI_CLASS] = byte(s.class)
	f[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	f[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	le.PutUint16(f[16:], uint16(elf.ET_EXEC))
	le.PutUint16(f[18:], uint16(s.machine))
	le.PutUint32(f[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(f[24:], s.entry)
	le.PutUint64(f[32:], elfHeaderSize)
	le.PutUint16(f[52:], elfHeaderSize)
	le.PutUint16(f[54:], elfPhdrSize)
	le.PutUint16(f[56:], uint16(phnum))

	ph := f[elfHeaderSize:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[8:], s.offset)
	le.PutUint64(ph[16:], testKernelVaddr)
	le.PutUint64(ph[24:], s.paddr)
	le.PutUint64(ph[32:], s.filesz)
	le.PutUint64(ph[40:], s.memsz)
	le.PutUint64(ph[48:], 0x200000)
	if s.pvh {
		noteOff := uint64(elfHeaderSize + 2*elfPhdrSize)
		ph := f[elfHeaderSize+elfPhdrSize:]
		le.PutUint32(ph[0:], uint32(elf.PT_NOTE))
		le.PutUint64(ph[8:], noteOff)
		le.PutUint64(ph[32:], uint64(notes.Len()))
		le.PutUint64(ph[40:], uint64(notes.Len()))
		copy(f[noteOff:], notes.Bytes())
	}
	copy(f[s.offset:], payload(s.filesz))
	return f
}

type bzSpec struct {
	version       uint16
	xloadflags    uint16
	relocatable   bool
	prefAddress   uint64
	initSize      uint32
	cmdlineSize   uint32
	initrdAddrMax uint32
	pmSize        int
	setupSects    uint8
}

func defaultBz() bzSpec {
	return bzSpec{
		version:       0x020f,
		xloadflags:    xlfKernel64 | 1<<1,
		relocatable:   true,
		prefAddress:   0x100_0000,
		initSize:      0x80_0000,
		cmdlineSize:   2047,
		initrdAddrMax: 0x7fff_ffff,
		pmSize:        0x1800,
		setupSects:    4,
	}
}

// buildBzImage writes a bzImage: a boot sector and setup sectors holding a
// setup header, then a protected-mode payload.
func buildBzImage(s bzSpec) []byte {
	le := binary.LittleEndian
	sects := int(s.setupSects)
	if sects == 0 {
		sects = 4
	}
	f := make([]byte, (sects+1)*512+s.pmSize)
	f[hdrSetupSects] = s.setupSects
	le.PutUint32(f[hdrSyssize:], uint32(s.pmSize/16))
	le.PutUint16(f[hdrBootFlag:], bootFlagMagic)
	f[hdrJump] = 0xeb
	f[hdrJump+1] = 0x26c - 0x202
	copy(f[hdrMagic:], hdrSMagic)
	le.PutUint16(f[hdrVersion:], s.version)
	le.PutUint16(f[0x20e:], 0x1234) // kernel_version: must survive the copy
	f[hdrLoadflags] = loadflagLoadedHigh
	le.PutUint32(f[0x214:], 0x100000) // code32_start
	le.PutUint32(f[hdrInitrdAddrMax:], s.initrdAddrMax)
	le.PutUint32(f[hdrKernelAlignment:], 0x20_0000)
	if s.relocatable {
		f[hdrRelocatable] = 1
	}
	le.PutUint16(f[hdrXloadflags:], s.xloadflags)
	le.PutUint32(f[hdrCmdlineSize:], s.cmdlineSize)
	le.PutUint64(f[hdrPrefAddress:], s.prefAddress)
	le.PutUint32(f[hdrInitSize:], s.initSize)
	copy(f[(sects+1)*512:], payload(uint64(s.pmSize)))
	return f
}

func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func newMem(t testing.TB, size uint64) *memory.Guest {
	t.Helper()
	m, err := memory.New(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func testACPI() acpi.Config {
	return acpi.Config{CPUs: 2, SleepControlPort: 0x3c0, SleepStatusPort: 0x3c1, ResetPort: 0x3c2, ResetValue: 1}
}

func read(t testing.TB, m *memory.Guest, addr, n uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := m.ReadAt(b, int64(addr)); err != nil {
		t.Fatalf("read guest [%#x, +%#x): %v", addr, n, err)
	}
	return b
}

func u16(b []byte, off int) uint64 { return uint64(binary.LittleEndian.Uint16(b[off:])) }
func u32(b []byte, off int) uint64 { return uint64(binary.LittleEndian.Uint32(b[off:])) }
func u64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

// translate walks the 4-level page tables at cr3 in guest memory the way
// the MMU does, for an address mapped by a 2 MiB page.
func translate(t testing.TB, m *memory.Guest, cr3, vaddr uint64) (uint64, bool) {
	t.Helper()
	const addrMask = 0x000f_ffff_ffff_f000
	table := cr3 & addrMask
	for level, shift := range []uint{39, 30, 21} {
		idx := (vaddr >> shift) & 511
		e := u64(read(t, m, table+idx*8, 8), 0)
		if e&ptePresent == 0 {
			return 0, false
		}
		if level == 2 {
			if e&ptePageSize == 0 {
				t.Fatalf("PD entry for %#x is not a 2 MiB page", vaddr)
			}
			return e&addrMask&^(hugePage-1) | vaddr&(hugePage-1), true
		}
		if e&ptePageSize != 0 {
			t.Fatalf("huge page at level %d for %#x", level, vaddr)
		}
		table = e & addrMask
	}
	return 0, false
}

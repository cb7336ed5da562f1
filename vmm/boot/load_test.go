package boot

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/vmm/acpi"
	"github.com/smolvm/smol/vmm/memory"
)

const testMem = 64 << 20

// dirty fills guest memory with a pattern so tests notice bytes the loader
// should have written (or zeroed) but did not.
func dirty(m *memory.Guest, from, to uint64) {
	b := m.Bytes()[from:to]
	for i := range b {
		b[i] = 0xAA
	}
}

func TestLoadELFWithPVHNote(t *testing.T) {
	spec := defaultELF()
	spec.pvh = true
	kernel := writeFile(t, "vmlinux", buildELF(spec))
	initrdData := payload(10000)
	initrd := writeFile(t, "initrd", initrdData)
	m := newMem(t, testMem)
	dirty(m, testKernelPaddr, testKernelPaddr+spec.memsz)

	e, err := Load(m, Config{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0 quiet", ACPI: testACPI()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Protocol != ProtocolPVH || e.Regs.RIP != spec.pvhEntry || e.Regs.RBX != StartInfoAddr || e.Regs.RFLAGS != 2 {
		t.Fatalf("entry %+v", e)
	}

	// The segment: file bytes, then zeroed .bss.
	got := read(t, m, testKernelPaddr, spec.memsz)
	if !bytes.Equal(got[:spec.filesz], payload(spec.filesz)) {
		t.Error("segment contents differ from the file")
	}
	if i := bytes.IndexFunc(got[spec.filesz:], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf(".bss not zeroed at offset %#x", spec.filesz+uint64(i))
	}

	si := read(t, m, StartInfoAddr, startInfoSize)
	if u32(si, 0) != 0x336ec578 || u32(si, 4) != 1 || u32(si, 12) != 1 {
		t.Fatalf("start_info magic %#x version %d modules %d", u32(si, 0), u32(si, 4), u32(si, 12))
	}
	if u64(si, 24) != CmdlineAddr || u64(si, 32) != ACPIAddr {
		t.Errorf("cmdline_paddr %#x rsdp_paddr %#x", u64(si, 24), u64(si, 32))
	}
	if got := read(t, m, CmdlineAddr, 20); string(got) != "console=ttyS0 quiet\x00" {
		t.Errorf("command line %q", got)
	}
	mod := read(t, m, u64(si, 16), modlistEntrySize)
	if u64(mod, 0) != e.InitrdAddr || u64(mod, 8) != 10000 {
		t.Errorf("module 0 = %#x+%d, entry says %#x", u64(mod, 0), u64(mod, 8), e.InitrdAddr)
	}
	checkInitrd(t, m, e, initrdData, m.LowEnd())

	// Memory map as hvm_memmap_table_entry records.
	n := u32(si, 48)
	want := []E820Entry{{0, BIOSAreaStart, E820RAM}, {BIOSAreaStart, HighMemStart - BIOSAreaStart, E820Reserved}, {HighMemStart, testMem - HighMemStart, E820RAM}}
	if n != uint64(len(want)) {
		t.Fatalf("memmap has %d entries", n)
	}
	mm := read(t, m, u64(si, 40), n*memmapEntrySize)
	for i, w := range want {
		r := mm[i*memmapEntrySize:]
		if u64(r, 0) != w.Addr || u64(r, 8) != w.Size || u32(r, 16) != uint64(w.Type) {
			t.Errorf("memmap[%d] = %#x+%#x type %d, want %+v", i, u64(r, 0), u64(r, 8), u32(r, 16), w)
		}
	}

	if got := read(t, m, ACPIAddr, 8); string(got) != "RSD PTR " {
		t.Errorf("no RSDP at %#x: %q", ACPIAddr, got)
	}

	var s kvm.Sregs
	s.CR0 = 0x60000010 // KVM's reset value: CD|NW|ET
	e.SetupSregs(&s)
	if s.CR0 != cr0PE|cr0ET || s.CR4 != 0 || s.EFER != 0 {
		t.Errorf("CR0 %#x CR4 %#x EFER %#x", s.CR0, s.CR4, s.EFER)
	}
	if s.CS.Selector != 0x10 || s.CS.Type != 0xb || s.CS.DB != 1 || s.CS.L != 0 || s.CS.G != 1 || s.CS.Limit != 0xffffffff || s.CS.Base != 0 || s.CS.Present != 1 || s.CS.S != 1 {
		t.Errorf("CS %+v", s.CS)
	}
	checkSegmentsMatchGDT(t, m, &s)
}

func checkInitrd(t *testing.T, m *memory.Guest, e *Entry, data []byte, limit uint64) {
	t.Helper()
	if e.InitrdAddr%pageSize != 0 || e.InitrdAddr < e.KernelEnd || e.InitrdAddr+e.InitrdSize > limit {
		t.Errorf("initrd at [%#x, +%#x), kernel ends at %#x, limit %#x", e.InitrdAddr, e.InitrdSize, e.KernelEnd, limit)
	}
	if limit-(e.InitrdAddr+e.InitrdSize) >= pageSize {
		t.Errorf("initrd at %#x+%#x is not as high as possible below %#x", e.InitrdAddr, e.InitrdSize, limit)
	}
	if !bytes.Equal(read(t, m, e.InitrdAddr, uint64(len(data))), data) {
		t.Error("initrd contents differ from the file")
	}
}

// checkSegmentsMatchGDT reads each loaded selector's descriptor from the GDT
// in guest memory and checks that the register cache agrees with it.
func checkSegmentsMatchGDT(t *testing.T, m *memory.Guest, s *kvm.Sregs) {
	t.Helper()
	if s.GDT.Base != GDTAddr || s.GDT.Limit != 8*gdtEntries-1 {
		t.Fatalf("GDTR %+v", s.GDT)
	}
	for name, seg := range map[string]kvm.Segment{"CS": s.CS, "DS": s.DS, "ES": s.ES, "SS": s.SS, "FS": s.FS, "GS": s.GS, "TR": s.TR} {
		desc := u64(read(t, m, s.GDT.Base+uint64(seg.Selector), 8), 0)
		if want := segmentFromDescriptor(seg.Selector, desc); want != seg {
			t.Errorf("%s = %+v, GDT says %+v", name, seg, want)
		}
	}
	if s.TR.S != 0 || s.TR.Type != 0xb || s.TR.Limit != 0x67 {
		t.Errorf("TR %+v is not a busy TSS", s.TR)
	}
}

func TestLoadELF64BitProtocol(t *testing.T) {
	spec := defaultELF()
	spec.entry = testKernelVaddr + 0x100 // virtual: must be translated
	kernel := writeFile(t, "vmlinux", buildELF(spec))
	m := newMem(t, testMem)
	e, err := Load(m, Config{Kernel: kernel, Cmdline: "root=/dev/vda", ACPI: testACPI()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Protocol != ProtocolLinux64 || e.Regs.RIP != testKernelPaddr+0x100 || e.Regs.RSI != ZeroPageAddr {
		t.Fatalf("entry %+v", e)
	}
	zp := read(t, m, ZeroPageAddr, zeroPageSize)
	if u16(zp, hdrBootFlag) != 0xAA55 || string(zp[hdrMagic:hdrMagic+4]) != "HdrS" || zp[hdrTypeOfLoader] != 0xff {
		t.Errorf("synthesized header: flag %#x magic %q loader %#x", u16(zp, hdrBootFlag), zp[hdrMagic:hdrMagic+4], zp[hdrTypeOfLoader])
	}
	if u32(zp, hdrCmdLinePtr) != CmdlineAddr || u64(zp, bpACPIRSDPAddr) != ACPIAddr || u32(zp, hdrRamdiskSize) != 0 {
		t.Errorf("cmd_line_ptr %#x acpi_rsdp_addr %#x ramdisk_size %d", u32(zp, hdrCmdLinePtr), u64(zp, bpACPIRSDPAddr), u32(zp, hdrRamdiskSize))
	}
	checkLongMode(t, m, e)
}

// checkLongMode checks the 64-bit protocol's CPU state and walks the page
// tables it points at.
func checkLongMode(t *testing.T, m *memory.Guest, e *Entry) {
	t.Helper()
	var s kvm.Sregs
	e.SetupSregs(&s)
	if s.CR0&(cr0PE|cr0PG) != cr0PE|cr0PG || s.CR4&cr4PAE == 0 || s.EFER != eferLME|eferLMA || s.CR3 != PML4Addr {
		t.Errorf("CR0 %#x CR3 %#x CR4 %#x EFER %#x", s.CR0, s.CR3, s.CR4, s.EFER)
	}
	if s.CS.L != 1 || s.CS.DB != 0 || s.CS.Selector != 0x10 || s.DS.Selector != 0x18 || s.SS.Selector != 0x18 {
		t.Errorf("CS %+v DS %+v", s.CS, s.DS)
	}
	checkSegmentsMatchGDT(t, m, &s)
	for _, a := range []uint64{0, ZeroPageAddr + 5, e.Regs.RIP, 0x3fff_ffff, 0x4000_0000, 0xbfff_fff0, 0xfee0_0000, 0xffff_ffff} {
		if p, ok := translate(t, m, s.CR3, a); !ok || p != a {
			t.Errorf("virtual %#x maps to %#x (mapped %v), want identity", a, p, ok)
		}
	}
	if _, ok := translate(t, m, s.CR3, 1<<32); ok {
		t.Error("4 GiB is mapped; the tables should cover exactly the first 4 GiB")
	}
}

func TestLoadBzImage(t *testing.T) {
	spec := defaultBz()
	spec.initrdAddrMax = 0x2ff_ffff // the initrd must end at or below 48 MiB
	kernel := writeFile(t, "bzImage", buildBzImage(spec))
	initrdData := payload(3 << 20)
	initrd := writeFile(t, "initrd", initrdData)
	m := newMem(t, testMem)
	e, err := Load(m, Config{Kernel: kernel, Initrd: initrd, Cmdline: "console=hvc0", ACPI: testACPI()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Protocol != ProtocolLinux64 || e.Regs.RIP != 0x100_0200 || e.Regs.RSI != ZeroPageAddr {
		t.Fatalf("entry %+v", e)
	}
	if e.KernelStart != 0x100_0000 || e.KernelEnd != 0x100_0000+uint64(spec.initSize) {
		t.Errorf("kernel occupies [%#x, %#x), want init_size from 16 MiB", e.KernelStart, e.KernelEnd)
	}
	if !bytes.Equal(read(t, m, 0x100_0000, uint64(spec.pmSize)), payload(uint64(spec.pmSize))) {
		t.Error("protected-mode kernel not at its load address")
	}
	checkInitrd(t, m, e, initrdData, 0x300_0000)

	zp := read(t, m, ZeroPageAddr, zeroPageSize)
	if u16(zp, 0x20e) != 0x1234 || zp[hdrSetupSects] != 4 || u16(zp, hdrVersion) != 0x020f {
		t.Error("setup header not copied into the zero page")
	}
	if zp[hdrTypeOfLoader] != 0xff || zp[hdrLoadflags]&(loadflagCanUseHeap|loadflagLoadedHigh) != loadflagCanUseHeap|loadflagLoadedHigh || u16(zp, hdrHeapEndPtr) != heapEndPtr {
		t.Errorf("loader %#x loadflags %#x heap_end_ptr %#x", zp[hdrTypeOfLoader], zp[hdrLoadflags], u16(zp, hdrHeapEndPtr))
	}
	if u32(zp, hdrCmdLinePtr) != CmdlineAddr || u32(zp, bpExtCmdLinePtr) != 0 {
		t.Errorf("cmd_line_ptr %#x", u32(zp, hdrCmdLinePtr))
	}
	if u32(zp, hdrRamdiskImage) != e.InitrdAddr || u32(zp, hdrRamdiskSize) != 3<<20 || u32(zp, bpExtRamdiskImage) != 0 || u32(zp, bpExtRamdiskSize) != 0 {
		t.Errorf("ramdisk %#x+%#x", u32(zp, hdrRamdiskImage), u32(zp, hdrRamdiskSize))
	}
	if u64(zp, bpACPIRSDPAddr) != ACPIAddr {
		t.Errorf("acpi_rsdp_addr %#x", u64(zp, bpACPIRSDPAddr))
	}
	if zp[bpE820Entries] != 3 || u64(zp, bpE820Table+40) != HighMemStart || u32(zp, bpE820Table+20+16) != uint64(E820Reserved) {
		t.Errorf("e820: %d entries, third at %#x", zp[bpE820Entries], u64(zp, bpE820Table+40))
	}
	checkLongMode(t, m, e)
}

func TestBzImageVariants(t *testing.T) {
	// Protocol 2.12 predates acpi_rsdp_addr: the loader must leave it zero.
	spec := defaultBz()
	spec.version = 0x020c
	m := newMem(t, testMem)
	if _, err := Load(m, Config{Kernel: writeFile(t, "bz", buildBzImage(spec)), ACPI: testACPI()}); err != nil {
		t.Fatal(err)
	}
	if got := u64(read(t, m, ZeroPageAddr, zeroPageSize), bpACPIRSDPAddr); got != 0 {
		t.Errorf("acpi_rsdp_addr %#x written for protocol 2.12", got)
	}

	// Not relocatable: loaded at 1 MiB, runs at pref_address.
	spec = defaultBz()
	spec.relocatable = false
	spec.setupSects = 0 // means 4
	m = newMem(t, testMem)
	e, err := Load(m, Config{Kernel: writeFile(t, "bz", buildBzImage(spec)), ACPI: testACPI()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Regs.RIP != HighMemStart+0x200 || e.KernelStart != HighMemStart || e.KernelEnd != spec.prefAddress+uint64(spec.initSize) {
		t.Errorf("non-relocatable: RIP %#x kernel [%#x, %#x)", e.Regs.RIP, e.KernelStart, e.KernelEnd)
	}
	if !bytes.Equal(read(t, m, HighMemStart, 64), payload(64)) {
		t.Error("setup_sects 0 did not mean 4")
	}
}

func TestMemoryAboveFourGiB(t *testing.T) {
	size := memory.MMIOHoleStart + 256<<20
	m := newMem(t, size)
	spec := defaultBz()
	initrdData := payload(1 << 20)
	e, err := Load(m, Config{Kernel: writeFile(t, "bz", buildBzImage(spec)), Initrd: writeFile(t, "i", initrdData), ACPI: testACPI()})
	if err != nil {
		t.Fatal(err)
	}
	last := e.MemoryMap[len(e.MemoryMap)-1]
	if last != (E820Entry{memory.MMIOHoleEnd, 256 << 20, E820RAM}) {
		t.Errorf("high RAM entry %+v", last)
	}
	checkInitrd(t, m, e, initrdData, 0x8000_0000) // initrd_addr_max 0x7fffffff
}

func TestMemoryMap(t *testing.T) {
	got := memoryMap(memory.Layout(8 << 30))
	want := []E820Entry{
		{0, 0x9fc00, E820RAM},
		{0x9fc00, 0x60400, E820Reserved},
		{0x100000, memory.MMIOHoleStart - 0x100000, E820RAM},
		{1 << 32, 8<<30 - memory.MMIOHoleStart, E820RAM},
	}
	if len(got) != len(want) {
		t.Fatalf("map %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The ACPI tables must sit inside the reserved range.
	tables, _, err := acpi.Build(acpi.Config{CPUs: acpi.MaxCPUs, SleepControlPort: 1, SleepStatusPort: 2, ResetPort: 3}, ACPIAddr)
	if err != nil {
		t.Fatal(err)
	}
	if ACPIAddr < want[1].Addr || ACPIAddr+uint64(len(tables)) > want[1].Addr+want[1].Size {
		t.Error("ACPI tables are not inside the reserved BIOS area")
	}
}

func TestDescriptorRoundTrip(t *testing.T) {
	d := descriptor(0x12345678, 0xabcde, accessData, flagGranularity|flagDB)
	s := segmentFromDescriptor(0x18, d)
	if s.Base != 0x12345678 || s.Limit != 0xabcdefff || s.Type != 3 || s.S != 1 || s.Present != 1 || s.DB != 1 || s.G != 1 || s.L != 0 {
		t.Errorf("%+v", s)
	}
	// The flat 64-bit code descriptor every Linux loader uses.
	if d := gdt(ProtocolLinux64)[2]; d != 0x00af9b000000ffff {
		t.Errorf("64-bit code descriptor %#x", d)
	}
	if d := gdt(ProtocolPVH)[2]; d != 0x00cf9b000000ffff {
		t.Errorf("32-bit code descriptor %#x", d)
	}
}

func TestLoadErrors(t *testing.T) {
	elfWith := func(f func(*elfSpec)) []byte {
		s := defaultELF()
		f(&s)
		return buildELF(s)
	}
	bzWith := func(f func(*bzSpec)) []byte {
		s := defaultBz()
		f(&s)
		return buildBzImage(s)
	}
	good := buildELF(defaultELF())
	longCmd := strings.Repeat("x", 2048)
	cases := []struct {
		name    string
		kernel  []byte
		initrd  []byte
		cmdline string
		mem     uint64
		want    error
		msg     string // substring of the message, if checked
	}{
		{name: "text file", kernel: []byte("#!/bin/sh\necho this is not a kernel, but it is long enough to have a header at 0x202...\n"), want: ErrNotKernel,
			msg: "not a Linux kernel (want an x86-64 vmlinux ELF or a bzImage)"},
		{name: "empty file", kernel: nil, want: ErrNotKernel},
		{name: "zeros", kernel: make([]byte, 8192), want: ErrNotKernel},
		{name: "truncated ELF header", kernel: good[:40], want: ErrTruncated},
		{name: "truncated ELF data", kernel: good[:testDataOffset+10], want: ErrTruncated},
		{name: "aarch64 ELF", kernel: elfWith(func(s *elfSpec) { s.machine = 183 }), want: ErrWrongArch, msg: "ELF for aarch64, want x86-64"},
		{name: "i386 ELF", kernel: elfWith(func(s *elfSpec) { s.machine = 3; s.class = 1 }), want: ErrWrongArch, msg: "ELF for 32-bit 386"},
		{name: "segment outside memory", kernel: elfWith(func(s *elfSpec) { s.paddr = 0x1000_0000; s.entry = s.paddr }), want: ErrKernelTooBig,
			msg: "kernel (20 KiB at 256 MiB) does not fit in guest memory (64 MiB)"},
		{name: "segment in the MMIO hole", kernel: elfWith(func(s *elfSpec) { s.paddr = 0xfee0_0000; s.entry = s.paddr }), want: ErrKernelTooBig},
		{name: "segment wraps", kernel: elfWith(func(s *elfSpec) { s.paddr = ^uint64(0) - 10 }), want: ErrInvalidKernel},
		{name: "segment over boot structures", kernel: elfWith(func(s *elfSpec) { s.paddr = 0x8000; s.entry = s.paddr }), want: ErrInvalidKernel},
		{name: "filesz above memsz", kernel: elfWith(func(s *elfSpec) { s.memsz = 0x10 }), want: ErrInvalidKernel},
		{name: "entry outside segments", kernel: elfWith(func(s *elfSpec) { s.entry = 0x5000_0000 }), want: ErrInvalidKernel},
		{name: "PVH entry outside segments", kernel: elfWith(func(s *elfSpec) { s.pvh = true; s.pvhEntry = 0x200_0000 }), want: ErrInvalidKernel},
		{name: "memory too small", kernel: good, mem: 8 << 20, want: ErrKernelTooBig},
		{name: "initrd too big", kernel: good, initrd: make([]byte, 60<<20), want: ErrInitrdTooBig,
			msg: "initrd (60 MiB) does not fit in guest memory (64 MiB)"},
		{name: "cmdline too long for vmlinux", kernel: good, cmdline: longCmd, want: ErrCmdlineTooLong,
			msg: "kernel command line too long: 2048 bytes, the kernel accepts at most 2047"},
		{name: "cmdline too long for bzImage", kernel: bzWith(func(s *bzSpec) { s.cmdlineSize = 100 }), cmdline: longCmd[:101], want: ErrCmdlineTooLong},
		{name: "old boot protocol", kernel: bzWith(func(s *bzSpec) { s.version = 0x020a }), want: ErrUnsupportedKernel},
		{name: "32-bit-only bzImage", kernel: bzWith(func(s *bzSpec) { s.xloadflags = 0 }), want: ErrUnsupportedKernel},
		{name: "truncated bzImage payload", kernel: bzWith(func(s *bzSpec) {})[:5*512+0x100], want: ErrTruncated},
		{name: "bzImage cut in its header", kernel: bzWith(func(s *bzSpec) {})[:0x240], want: ErrTruncated},
		{name: "bzImage cut after setup", kernel: bzWith(func(s *bzSpec) {})[:5*512], want: ErrTruncated},
		{name: "bzImage too big for memory", kernel: bzWith(func(s *bzSpec) { s.initSize = 60 << 20 }), want: ErrKernelTooBig},
		{name: "bzImage init_size zero", kernel: bzWith(func(s *bzSpec) { s.initSize = 0 }), want: ErrInvalidKernel},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := c.mem
			if mem == 0 {
				mem = testMem
			}
			m := newMem(t, mem)
			cfg := Config{Kernel: writeFile(t, "kernel", c.kernel), Cmdline: c.cmdline, ACPI: testACPI()}
			if c.initrd != nil {
				cfg.Initrd = writeFile(t, "initrd", c.initrd)
			}
			_, err := Load(m, cfg)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line message %q", err)
			}
			if c.msg != "" && !strings.Contains(err.Error(), c.msg) {
				t.Errorf("message %q lacks %q", err, c.msg)
			}
		})
	}
}

func TestLoadErrorsAreTyped(t *testing.T) {
	m := newMem(t, testMem)
	s := defaultELF()
	s.machine = 183
	_, err := Load(m, Config{Kernel: writeFile(t, "k", buildELF(s)), ACPI: testACPI()})
	var ae *ArchError
	if !errors.As(err, &ae) || ae.Machine != "aarch64" {
		t.Errorf("error %v is not an *ArchError for aarch64", err)
	}
	_, err = Load(m, Config{Kernel: writeFile(t, "k", buildELF(defaultELF())), Initrd: writeFile(t, "i", make([]byte, 70<<20)), ACPI: testACPI()})
	var se *SizeError
	if !errors.As(err, &se) || se.What != "initrd" || se.Size != 70<<20 || se.Memory != testMem {
		t.Errorf("error %v is not a *SizeError for the initrd", err)
	}

	if _, err := Load(m, Config{Kernel: t.TempDir(), ACPI: testACPI()}); !errors.Is(err, ErrNotKernel) {
		t.Errorf("directory: %v", err)
	}
	if _, err := Load(m, Config{Kernel: "/nonexistent/vmlinux", ACPI: testACPI()}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(m, Config{Kernel: writeFile(t, "k", buildELF(defaultELF())), Initrd: "/nonexistent/initrd", ACPI: testACPI()}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing initrd: %v", err)
	}
	if _, err := Load(m, Config{Kernel: writeFile(t, "k", buildELF(defaultELF())), Cmdline: "a\x00b", ACPI: testACPI()}); err == nil {
		t.Error("command line with a NUL accepted")
	}
	if _, err := Load(m, Config{Kernel: writeFile(t, "k", buildELF(defaultELF())), ACPI: acpi.Config{}}); err == nil {
		t.Error("zero ACPI config accepted")
	}
}

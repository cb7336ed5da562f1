package kvm

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Test guests are a few hand-assembled instructions placed in an anonymous
// mapping registered as memory slot 0 at guest physical address 0.

const (
	testMemSize  = 4 << 20 // 4 MiB of guest RAM
	testCodeAddr = 0x10000 // where guest code is loaded and RIP starts
	testStackTop = 0x80000

	gdtAddr  = 0x1000
	pml4Addr = 0x2000
	pdptAddr = 0x3000
	pdAddr   = 0x4000
)

// guestMode is the CPU mode a test guest starts in.
type guestMode int

const (
	modeReal guestMode = iota
	modeProtected32
	modeLong64 // ring 0
	modeLong64Ring3
)

func (m guestMode) String() string {
	return [...]string{"real", "protected32", "long64", "long64-ring3"}[m]
}

type testGuest struct {
	sys  *System
	vm   *VM
	vcpu *VCPU
	mem  []byte
}

// openSystem opens /dev/kvm, skipping the test only when it does not exist.
func openSystem(t *testing.T) *System {
	t.Helper()
	if _, err := os.Stat(DevicePath); errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s does not exist", DevicePath)
	}
	sys, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	return sys
}

// newVM creates a VM with testMemSize bytes of RAM at GPA 0 in slot 0.
func newVM(t *testing.T, slotFlags uint32) (*System, *VM, []byte) {
	t.Helper()
	sys := openSystem(t)
	vm, err := sys.CreateVM()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	mem, err := unix.Mmap(-1, 0, testMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := vm.SetUserMemoryRegion(UserMemoryRegion{
		Slot:          0,
		Flags:         slotFlags,
		GuestPhysAddr: 0,
		MemorySize:    testMemSize,
		UserspaceAddr: uint64(uintptrOf(mem)),
	}); err != nil {
		t.Fatal(err)
	}
	return sys, vm, mem
}

// newGuest creates a VM and one vCPU set up in mode with code at
// testCodeAddr.
func newGuest(t *testing.T, mode guestMode, code []byte) *testGuest {
	t.Helper()
	sys, vm, mem := newVM(t, 0)
	vcpu, err := vm.CreateVCPU(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vcpu.Close() })
	g := &testGuest{sys: sys, vm: vm, vcpu: vcpu, mem: mem}
	copy(mem[testCodeAddr:], code)
	if err := g.setMode(mode); err != nil {
		t.Fatalf("set up %v mode: %v", mode, err)
	}
	return g
}

func (g *testGuest) setMode(mode guestMode) error {
	sregs, err := g.vcpu.Sregs()
	if err != nil {
		return err
	}
	regs := Regs{RFLAGS: 2, RIP: testCodeAddr, RSP: testStackTop}
	switch mode {
	case modeReal:
		for _, s := range []*Segment{&sregs.CS, &sregs.DS, &sregs.ES, &sregs.FS, &sregs.GS, &sregs.SS} {
			s.Base, s.Selector = 0, 0
		}
		// 16-bit code can only address 64 KiB from CS.base.
		sregs.CS.Base = testCodeAddr
		regs.RIP = 0
		regs.RSP = 0xfff0
	case modeProtected32:
		writeGDT(g.mem)
		sregs.GDT = DTable{Base: gdtAddr, Limit: gdtEntries*8 - 1}
		sregs.CR0 = cr0PE | cr0ET
		sregs.CS = flatSegment(selCode32, 0xb, 0, false)
		for _, s := range []*Segment{&sregs.DS, &sregs.ES, &sregs.FS, &sregs.GS, &sregs.SS} {
			*s = flatSegment(selData, 0x3, 0, false)
		}
	case modeLong64, modeLong64Ring3:
		writeGDT(g.mem)
		writePageTables(g.mem)
		sregs.GDT = DTable{Base: gdtAddr, Limit: gdtEntries*8 - 1}
		sregs.CR3 = pml4Addr
		sregs.CR4 = cr4PAE
		sregs.CR0 = cr0PE | cr0ET | cr0PG | cr0WP
		sregs.EFER = eferLME | eferLMA
		cs, ds := flatSegment(selCode64, 0xb, 0, true), flatSegment(selData, 0x3, 0, false)
		if mode == modeLong64Ring3 {
			cs, ds = flatSegment(selUserCode64|3, 0xb, 3, true), flatSegment(selUserData|3, 0x3, 3, false)
			// IOPL 3 lets ring 3 use IN/OUT.
			regs.RFLAGS |= 3 << 12
		}
		sregs.CS = cs
		for _, s := range []*Segment{&sregs.DS, &sregs.ES, &sregs.FS, &sregs.GS, &sregs.SS} {
			*s = ds
		}
		sregs.TR = Segment{Base: 0, Limit: 0x67, Selector: selTSS, Type: 0xb, Present: 1}
	}
	if err := g.vcpu.SetSregs(sregs); err != nil {
		return err
	}
	return g.vcpu.SetRegs(regs)
}

const (
	cr0PE   = 1 << 0
	cr0ET   = 1 << 4
	cr0WP   = 1 << 16
	cr0PG   = 1 << 31
	cr4PAE  = 1 << 5
	eferLME = 1 << 8
	eferLMA = 1 << 10

	selCode32     = 1 << 3
	selCode64     = 2 << 3
	selData       = 3 << 3
	selUserCode64 = 4 << 3
	selUserData   = 5 << 3
	selTSS        = 6 << 3
	gdtEntries    = 8 // the 64-bit TSS descriptor takes two
)

func flatSegment(sel uint16, typ uint8, dpl uint8, long bool) Segment {
	s := Segment{Base: 0, Limit: 0xffffffff, Selector: sel, Type: typ, Present: 1, DPL: dpl, S: 1, G: 1}
	if long {
		s.L = 1
	} else {
		s.DB = 1
	}
	return s
}

// writeGDT writes descriptors matching the Segment values setMode loads, so
// a guest that reloads a segment register gets the same thing.
func writeGDT(mem []byte) {
	desc := []uint64{
		0,
		0x00cf9b000000ffff, // 32-bit code, ring 0
		0x00af9b000000ffff, // 64-bit code, ring 0
		0x00cf93000000ffff, // data, ring 0
		0x00affb000000ffff, // 64-bit code, ring 3
		0x00cff3000000ffff, // data, ring 3
		0x00008b0000000067, // 64-bit TSS at 0, low half
		0,                  // TSS high half
	}
	for i, d := range desc {
		binary.LittleEndian.PutUint64(mem[gdtAddr+8*i:], d)
	}
}

// writePageTables identity-maps the first 1 GiB with 2 MiB pages, user
// accessible, so ring-3 guests work too and MMIO addresses above RAM are
// mapped.
func writePageTables(mem []byte) {
	const present, writable, user, huge = 1, 2, 4, 0x80
	binary.LittleEndian.PutUint64(mem[pml4Addr:], pdptAddr|present|writable|user)
	binary.LittleEndian.PutUint64(mem[pdptAddr:], pdAddr|present|writable|user)
	for i := uint64(0); i < 512; i++ {
		binary.LittleEndian.PutUint64(mem[pdAddr+8*i:], i<<21|present|writable|user|huge)
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

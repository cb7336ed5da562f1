package kvm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// Guest modes on this project's hosts (PVM, kvm_pvm, measured by running
// the same "mov al,0x42; out 0x10,al; hlt" guest in each mode): real mode,
// 32-bit protected mode without paging, 64-bit long mode with 4-level page
// tables at ring 0, and long mode at ring 3 all start from KVM_SET_SREGS
// and exit with the expected IO and HLT exits (HLT at ring 3 faults, as on
// hardware). Ring-0 code is emulated by PVM and slow, so the guests stay a
// handful of instructions. The tests below use 64-bit ring 0, the mode the
// VMM boots Linux in; TestGuestModes keeps the finding checked.

// run runs the vCPU once and fails the test unless it exits with want.
func (g *testGuest) run(t *testing.T, want ExitReason) {
	t.Helper()
	if err := g.vcpu.Run(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := g.vcpu.ExitReason(); got != want {
		regs, _ := g.vcpu.Regs()
		msg := ""
		if got == ExitInternalError {
			ie, _ := g.vcpu.InternalError()
			msg = fmt.Sprintf(" internal error %+v", ie)
		}
		t.Fatalf("exit reason %v, want %v (rip %#x)%s", got, want, regs.RIP, msg)
	}
}

func (g *testGuest) regs(t *testing.T) Regs {
	t.Helper()
	r, err := g.vcpu.Regs()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGuestModes(t *testing.T) {
	// mov al,0x42; out 0x10,al; hlt
	code := []byte{0xb0, 0x42, 0xe6, 0x10, 0xf4}
	for _, mode := range []guestMode{modeReal, modeProtected32, modeLong64, modeLong64Ring3} {
		t.Run(mode.String(), func(t *testing.T) {
			g := newGuest(t, mode, code)
			g.run(t, ExitIO)
			io, err := g.vcpu.IO()
			if err != nil {
				t.Fatal(err)
			}
			if io.Direction != IOOut || io.Port != 0x10 || !bytes.Equal(io.Data, []byte{0x42}) {
				t.Fatalf("IO exit %+v, want out 0x42 to port 0x10", io)
			}
			if mode == modeLong64Ring3 {
				// HLT is privileged: at ring 3 it raises #GP, which with no
				// IDT becomes a triple fault.
				g.run(t, ExitShutdown)
				return
			}
			g.run(t, ExitHLT)
		})
	}
}

func TestPortIO(t *testing.T) {
	code := []byte{
		0xb0, 0x42, // mov al, 0x42
		0xe6, 0x10, // out 0x10, al
		0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
		0xed,       // in eax, dx
		0x89, 0xc3, // mov ebx, eax
		0xf4, // hlt
	}
	g := newGuest(t, modeLong64, code)

	g.run(t, ExitIO)
	out, err := g.vcpu.IO()
	if err != nil {
		t.Fatal(err)
	}
	if out.Direction != IOOut || out.Size != 1 || out.Port != 0x10 || out.Count != 1 || !bytes.Equal(out.Data, []byte{0x42}) {
		t.Fatalf("OUT exit = %+v, want out size 1 port 0x10 count 1 data [0x42]", out)
	}

	g.run(t, ExitIO)
	in, err := g.vcpu.IO()
	if err != nil {
		t.Fatal(err)
	}
	if in.Direction != IOIn || in.Size != 4 || in.Port != 0x3f8 || in.Count != 1 || len(in.Data) != 4 {
		t.Fatalf("IN exit = %+v, want in size 4 port 0x3f8 count 1 with 4 data bytes", in)
	}
	binary.LittleEndian.PutUint32(in.Data, 0xdeadbeef)

	g.run(t, ExitHLT)
	if r := g.regs(t); r.RAX != 0xdeadbeef || r.RBX != 0xdeadbeef {
		t.Fatalf("after IN: rax %#x rbx %#x, want 0xdeadbeef in both", r.RAX, r.RBX)
	}
	if _, err := g.vcpu.IO(); err == nil {
		t.Fatal("IO() on a HLT exit succeeded")
	}
}

func TestStringPortIO(t *testing.T) {
	const src = 0x20000
	code := []byte{
		0xbe, 0x00, 0x00, 0x02, 0x00, // mov esi, 0x20000
		0xb9, 0x04, 0x00, 0x00, 0x00, // mov ecx, 4
		0x66, 0xba, 0x20, 0x00, // mov dx, 0x20
		0xf3, 0x6e, // rep outsb
		0xf4, // hlt
	}
	g := newGuest(t, modeLong64, code)
	copy(g.mem[src:], "abcd")
	var got []byte
	for {
		if err := g.vcpu.Run(); err != nil {
			t.Fatal(err)
		}
		if g.vcpu.ExitReason() == ExitHLT {
			break
		}
		io, err := g.vcpu.IO()
		if err != nil {
			t.Fatal(err)
		}
		if io.Direction != IOOut || io.Port != 0x20 || io.Size != 1 || len(io.Data) != int(io.Count) {
			t.Fatalf("exit %+v, want byte outs to port 0x20", io)
		}
		got = append(got, io.Data...)
		if len(got) > 4 {
			break
		}
	}
	if string(got) != "abcd" {
		t.Fatalf("rep outsb delivered %q, want %q", got, "abcd")
	}
}

func TestMMIO(t *testing.T) {
	const addr = 0x1000_0000 // 256 MiB: mapped by the page tables, no memory slot
	code := []byte{
		0xbf, 0x00, 0x00, 0x00, 0x10, // mov edi, 0x10000000
		0xb8, 0x44, 0x33, 0x22, 0x11, // mov eax, 0x11223344
		0x89, 0x07, // mov [rdi], eax
		0x48, 0x8b, 0x5f, 0x08, // mov rbx, [rdi+8]
		0xf4, // hlt
	}
	g := newGuest(t, modeLong64, code)

	g.run(t, ExitMMIO)
	w, err := g.vcpu.MMIO()
	if err != nil {
		t.Fatal(err)
	}
	if w.PhysAddr != addr || !w.IsWrite || !bytes.Equal(w.Data, []byte{0x44, 0x33, 0x22, 0x11}) {
		t.Fatalf("MMIO write exit = %+v, want write of 44 33 22 11 at %#x", w, addr)
	}

	g.run(t, ExitMMIO)
	r, err := g.vcpu.MMIO()
	if err != nil {
		t.Fatal(err)
	}
	if r.PhysAddr != addr+8 || r.IsWrite || len(r.Data) != 8 {
		t.Fatalf("MMIO read exit = %+v, want 8-byte read at %#x", r, addr+8)
	}
	binary.LittleEndian.PutUint64(r.Data, 0x0123456789abcdef)

	g.run(t, ExitHLT)
	if rbx := g.regs(t).RBX; rbx != 0x0123456789abcdef {
		t.Fatalf("after MMIO read rbx = %#x, want 0x0123456789abcdef", rbx)
	}
}

func TestHLT(t *testing.T) {
	g := newGuest(t, modeLong64, []byte{0xf4})
	g.run(t, ExitHLT)
	if rip := g.regs(t).RIP; rip != testCodeAddr+1 {
		t.Fatalf("rip after HLT = %#x, want %#x", rip, testCodeAddr+1)
	}
	if s := ExitHLT.String(); s != "HLT" {
		t.Errorf("ExitHLT.String() = %q", s)
	}
	if s := ExitReason(999).String(); s != "ExitReason(999)" {
		t.Errorf("ExitReason(999).String() = %q", s)
	}
}

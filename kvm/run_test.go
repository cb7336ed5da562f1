package kvm

import (
	"encoding/binary"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestImmediateExit(t *testing.T) {
	requireCap(t, openSystem(t), CapImmediateExit)
	g := newGuest(t, modeLong64, []byte{0xf4}) // hlt
	g.vcpu.SetImmediateExit(true)
	err := g.vcpu.Run()
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, unix.EINTR) {
		t.Fatalf("Run with immediate_exit = %v, want ErrInterrupted wrapping EINTR", err)
	}
	// (The exit reason is not updated here: KVM returns before entering.)
	if rip := g.regs(t).RIP; rip != testCodeAddr {
		t.Fatalf("guest ran with immediate_exit set: rip %#x", rip)
	}
	g.vcpu.SetImmediateExit(false)
	g.run(t, ExitHLT)
}

// TestSignalKick checks the way a VMM stops a vCPU stuck in the guest: a
// signal sent to the thread blocked in KVM_RUN makes Run return
// ErrInterrupted.
func TestSignalKick(t *testing.T) {
	g := newGuest(t, modeLong64, []byte{0xeb, 0xfe}) // jmp . (forever)

	// Without a Notify, the Go runtime ignores SIGUSR1 but still installs a
	// handler, which is all an interrupted KVM_RUN needs.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGUSR1)
	defer signal.Stop(sigs)

	tids := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		done <- g.vcpu.Run()
	}()
	tid := <-tids
	deadline := time.After(5 * time.Second)
	// Keep signalling: one that lands before KVM_RUN starts is absorbed by
	// the Go handler and would leave the guest spinning.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, ErrInterrupted) {
				t.Fatalf("Run after a signal = %v, want ErrInterrupted", err)
			}
			if r := g.vcpu.ExitReason(); r != ExitIntr {
				t.Errorf("exit reason %v, want INTR", r)
			}
			return
		case <-tick.C:
			if err := unix.Tgkill(unix.Getpid(), tid, unix.SIGUSR1); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			// Unstick the goroutine before failing so the test binary exits.
			g.vcpu.SetImmediateExit(true)
			unix.Tgkill(unix.Getpid(), tid, unix.SIGUSR1)
			t.Fatal("Run did not return within 5 s of repeated SIGUSR1")
		}
	}
}

func TestDirtyLog(t *testing.T) {
	sys := openSystem(t)
	_, vm, mem := newVM(t, MemLogDirtyPages)
	vcpu, err := vm.CreateVCPU(0)
	must(t, err)
	t.Cleanup(func() { vcpu.Close() })
	g := &testGuest{sys: sys, vm: vm, vcpu: vcpu, mem: mem}

	const target = 0x20_0000 // page 512
	code := []byte{
		0xbf, 0x00, 0x00, 0x20, 0x00, // mov edi, 0x200000
		0xc7, 0x07, 0x78, 0x56, 0x34, 0x12, // mov dword [rdi], 0x12345678
		0xf4, // hlt
	}
	copy(mem[testCodeAddr:], code)
	must(t, g.setMode(modeLong64))

	bitmap := make([]uint64, testMemSize/4096/64)
	must(t, vm.GetDirtyLog(0, bitmap)) // start from a clean log
	g.run(t, ExitHLT)
	if got := binary.LittleEndian.Uint32(mem[target:]); got != 0x12345678 {
		t.Fatalf("guest write not in memory: %#x", got)
	}
	must(t, vm.GetDirtyLog(0, bitmap))
	page := target / 4096
	if bitmap[page/64]&(1<<(page%64)) == 0 {
		t.Fatalf("page %d written by the guest is not in the dirty log", page)
	}
	untouched := 0x30_0000 / 4096
	if bitmap[untouched/64]&(1<<(untouched%64)) != 0 {
		t.Errorf("untouched page %d reported dirty", untouched)
	}
	// Reading the log resets it.
	must(t, vm.GetDirtyLog(0, bitmap))
	if bitmap[page/64]&(1<<(page%64)) != 0 {
		t.Error("page still dirty after the log was read and nothing wrote it")
	}
	if err := vm.GetDirtyLog(0, nil); err == nil {
		t.Error("GetDirtyLog with an empty bitmap succeeded")
	}
}

func TestIOEventFD(t *testing.T) {
	code := []byte{
		0xb0, 0x07, // mov al, 7
		0xe6, 0x50, // out 0x50, al   (absorbed by the ioeventfd)
		0xe6, 0x51, // out 0x51, al   (exits)
		0xf4, // hlt
	}
	g := newGuest(t, modeLong64, code)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	must(t, err)
	defer unix.Close(efd)
	must(t, g.vm.IOEventFD(IOEventFD{Addr: 0x50, Len: 1, FD: int32(efd), Flags: IOEventFDPIO}))

	g.run(t, ExitIO)
	io, err := g.vcpu.IO()
	must(t, err)
	if io.Port != 0x51 {
		t.Fatalf("first IO exit on port %#x; the write to 0x50 should have gone to the eventfd", io.Port)
	}
	var buf [8]byte
	if _, err := unix.Read(efd, buf[:]); err != nil {
		t.Fatalf("eventfd not signalled: %v", err)
	}
	must(t, g.vm.IOEventFD(IOEventFD{Addr: 0x50, Len: 1, FD: int32(efd), Flags: IOEventFDPIO | IOEventFDDeassign}))
	// Deassigning twice fails: the registration is really gone.
	if err := g.vm.IOEventFD(IOEventFD{Addr: 0x50, Len: 1, FD: int32(efd), Flags: IOEventFDPIO | IOEventFDDeassign}); err == nil {
		t.Error("second deassign succeeded")
	}
	g.run(t, ExitHLT)
}

func TestIRQFD(t *testing.T) {
	_, vm, _ := newVM(t, 0)
	must(t, vm.CreateIRQChip())
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	must(t, err)
	defer unix.Close(efd)
	must(t, vm.IRQFD(efd, 5))
	// The same eventfd cannot be bound twice.
	if err := vm.IRQFD(efd, 5); !errors.Is(err, unix.EBUSY) {
		t.Errorf("second IRQFD = %v, want EBUSY", err)
	}
	must(t, vm.DeassignIRQFD(efd, 5))
	must(t, vm.IRQFD(efd, 6))
	if err := vm.IRQFD(-1, 5); err == nil {
		t.Error("IRQFD(-1) succeeded")
	}
}

func TestEnableCapSplitIRQChip(t *testing.T) {
	sys := openSystem(t)
	requireCap(t, sys, CapSplitIRQChip)
	_, vm, _ := newVM(t, 0)
	must(t, vm.EnableCap(CapSplitIRQChip, 24))
	// With a split irqchip the PIC and IOAPIC are the VMM's, so creating the
	// full in-kernel one must now fail.
	if err := vm.CreateIRQChip(); err == nil {
		t.Error("CreateIRQChip after enabling the split irqchip succeeded")
	}
	if err := vm.EnableCap(CapSplitIRQChip, 1, 2, 3, 4, 5); err == nil {
		t.Error("EnableCap with five arguments succeeded")
	}
}

func TestSetGSIRoutingOnSplitIRQChip(t *testing.T) {
	sys := openSystem(t)
	requireCap(t, sys, CapSplitIRQChip)
	_, vm, _ := newVM(t, 0)
	must(t, vm.EnableCap(CapSplitIRQChip, 24))
	// GSI 5 to vector 0x40 on APIC 0, fixed delivery, edge: what the VMM's
	// I/O APIC makes of a redirection entry.
	must(t, vm.SetGSIRouting([]MSIRoute{{GSI: 5, AddressLo: 0xFEE0_0000, Data: 0x40}, {GSI: 6, AddressLo: 0xFEE0_1000, Data: 0x41}}))
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	must(t, err)
	defer unix.Close(efd)
	must(t, vm.IRQFD(efd, 5))
	// Replacing the table while an irqfd uses one of its GSIs is how the
	// guest reprograms a pin; an empty table is how it masks them all.
	must(t, vm.SetGSIRouting(nil))
	must(t, vm.SetGSIRouting([]MSIRoute{{GSI: 5, AddressLo: 0xFEE0_0000, Data: 0x42}}))
	if err := vm.SetGSIRouting(make([]MSIRoute, maxGSIRoutes+1)); err == nil {
		t.Error("a table larger than KVM_MAX_IRQ_ROUTES was accepted")
	}
}

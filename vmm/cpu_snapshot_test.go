package vmm

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smolvm/smol/internal/testkernel"
)

// inLoopCode counts its starts at bootsAddr, zeroes the counter, then
// reads port 0x80 and counts, forever: nearly every moment of the guest
// is an IN exit.
var inLoopCode = []byte{
	0x48, 0xff, 0x04, 0x25, 0x08, 0x00, 0x20, 0x00, // inc qword [0x200008]
	0x48, 0xc7, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, // mov qword [0x200000], 0
	0xe4, 0x80, // loop: in al, 0x80
	0x48, 0xff, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00, // inc qword [0x200000]
	0xeb, 0xf4, // jmp loop
}

const (
	inAddr    = testkernel.LoadAddr + 20 // the IN instruction
	bootsAddr = counterAddr + 8
)

// tinyMachine builds (not starts) a 1-vCPU, 64 MiB machine whose
// "kernel" is code, on the host's /dev/kvm (PVM allowed).
func tinyMachine(t *testing.T, code []byte) *Machine {
	t.Helper()
	return tinyMachineN(t, code, 1)
}

func tinyMachineN(t *testing.T, code []byte, cpus int) *Machine {
	t.Helper()
	return tinyMachineWith(t, code, Config{CPUs: cpus})
}

// tinyMachineWith is tinyMachine with cfg's CPUs and irqchip; its kernel
// and memory are the test's.
func tinyMachineWith(t *testing.T, code []byte, cfg Config) *Machine {
	t.Helper()
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Setenv("SMOL_ALLOW_PVM", "1")
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, code), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Kernel: kernel, CPUs: cfg.CPUs, Memory: 64 << 20, IRQChip: cfg.IRQChip})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(); m.Wait(); m.Close() })
	return m
}

// readCounter is a port device that counts the guest's reads.
type readCounter struct{ reads atomic.Uint64 }

func (d *readCounter) Read(offset uint64, data []byte)  { d.reads.Add(1); clear(data) }
func (d *readCounter) Write(offset uint64, data []byte) {}

// TestStateAtAnINExitIsPastTheIN: a paused vCPU's state is read only
// after its pending IN completed. The guest counts each IN after it, so
// at any instruction boundary the device has served as many reads as the
// guest counted, or one more when the vCPU stands between the IN and its
// count. A state read at an IN exit that had not completed would show RIP
// still at the IN with the device one read ahead: a restore would run the
// IN again.
func TestStateAtAnINExitIsPastTheIN(t *testing.T) {
	m := tinyMachine(t, inLoopCode)
	dev := &readCounter{}
	if err := m.pio.Register(0x80, 1, dev); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, m, 0)
	for i := 0; i < 200; i++ {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
		vcpus, _, err := m.CPUState()
		if err != nil {
			t.Fatal(err)
		}
		rip, reads, counted := vcpus[0].Regs.RIP, dev.reads.Load(), counter(t, m)
		switch {
		case rip == inAddr && reads != counted:
			t.Fatalf("pause %d: RIP at the IN with %d reads served and %d counted: the IN's exit did not complete", i, reads, counted)
		case rip != inAddr && reads != counted && reads != counted+1:
			t.Fatalf("pause %d: RIP %#x, %d reads, %d counted", i, rip, reads, counted)
		}
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestoredVCPUContinues copies a paused machine's RAM and CPU state
// into a second machine: the copy carries on counting from where the
// first stood and never passes the entry point again (its start count
// stays 1), the state reads back as it was set, and the paused original
// is untouched.
func TestRestoredVCPUContinues(t *testing.T) {
	parent := pausedCounter(t, 1000)
	vcpus, vm, err := parent.CPUState()
	if err != nil {
		t.Fatal(err)
	}
	at := counter(t, parent)

	child := tinyMachine(t, inLoopCode)
	copy(child.Memory().Bytes(), parent.Memory().Bytes())
	if err := child.RestoreCPUState(vcpus, vm); err != nil {
		t.Fatal(err)
	}
	back, _, err := childState(child)
	if err != nil {
		t.Fatal(err)
	}
	if back.Regs != vcpus[0].Regs || back.Sregs != vcpus[0].Sregs || back.MPState != vcpus[0].MPState ||
		back.XCRs != vcpus[0].XCRs || back.DebugRegs != vcpus[0].DebugRegs || len(back.MSRs) != len(vcpus[0].MSRs) {
		t.Fatalf("state read back differs from what was set:\n set %+v\n got %+v", vcpus[0].Regs, back.Regs)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, child, at)
	b, err := child.Memory().Slice(bootsAddr, 8)
	if err != nil {
		t.Fatal(err)
	}
	if boots := binary.LittleEndian.Uint64(b); boots != 1 {
		t.Fatalf("the child passed the entry point again (%d starts): it did not continue", boots)
	}
	// The parent, still paused, kept its own count.
	time.Sleep(10 * time.Millisecond)
	if c := counter(t, parent); c != at {
		t.Errorf("the paused parent's counter moved from %d to %d", at, c)
	}
	parent.Resume()
	waitAdvance(t, parent, at)
}

// childState reads a not-yet-started machine's vCPU 0 state (CPUState
// wants a paused machine; before Start nothing runs either).
func childState(m *Machine) (VCPUState, VMState, error) {
	indices, err := m.sys.MSRIndexList()
	if err != nil {
		return VCPUState{}, VMState{}, err
	}
	s, err := captureVCPU(m.vcpus[0].fd, sortedCopy(indices))
	if err != nil {
		return s, VMState{}, err
	}
	vm, err := m.captureVM()
	return s, vm, err
}

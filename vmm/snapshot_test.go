package vmm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/smolvm/smol/internal/testkernel"
	"github.com/smolvm/smol/snapshot"
)

func TestSnapshotOfAPausedMachine(t *testing.T) {
	m := tinyMachine(t, inLoopCode)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, m, 100)
	path := filepath.Join(t.TempDir(), "m.snap")
	if err := m.Snapshot(path, SnapshotOptions{}); !errors.Is(err, ErrNotPaused) {
		t.Fatalf("snapshot of a running machine: %v", err)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(path, SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(path, SnapshotOptions{}); !errors.Is(err, os.ErrExist) {
		t.Errorf("a second snapshot over the first: %v", err)
	}
	want, wantVM, err := m.CPUState()
	if err != nil {
		t.Fatal(err)
	}
	r, err := snapshot.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var host HostState
	var ms MachineState
	var v VCPUState
	var vm VMState
	for _, s := range []struct {
		name    string
		version uint32
		into    any
	}{{"host", hostSectionVersion, &host}, {machineSection, machineSectionVersion, &ms}, {"vcpu.0", vcpuSectionVersion, &v}, {"vm", vmSectionVersion, &vm}} {
		if err := r.Section(s.name, s.version, s.into); err != nil {
			t.Fatal(err)
		}
	}
	if host.CPUVendor == "" || host.Arch != "amd64" || ms.CPUs != 1 || ms.Memory != 64<<20 {
		t.Errorf("host %+v, machine %+v", host, ms)
	}
	if v.Regs != want[0].Regs || v.Sregs != want[0].Sregs || v.XSave != want[0].XSave || v.LAPIC != want[0].LAPIC || len(v.MSRs) != len(want[0].MSRs) {
		t.Error("the vCPU section differs from the paused vCPU's state")
	}
	if vm.IOAPIC != wantVM.IOAPIC || vm.PIT != wantVM.PIT {
		t.Error("the VM section differs from the VM's state")
	}
	f, off, length := r.RAM()
	if length != int64(m.Memory().Size()) {
		t.Fatalf("RAM of %d bytes, the guest has %d", length, m.Memory().Size())
	}
	got := make([]byte, length)
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, m.Memory().Bytes()) {
		t.Error("the snapshot's RAM differs from the paused guest's")
	}
}

// TestRestoreFromASnapshotFile: a machine restored from a paused one's
// snapshot continues its count without passing the entry point again,
// and neither the file nor the paused original sees its writes.
func TestRestoreFromASnapshotFile(t *testing.T) {
	parent := pausedCounter(t, 1000)
	path := filepath.Join(t.TempDir(), "m.snap")
	if err := parent.Snapshot(path, SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := counter(t, parent)

	child, err := Restore(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Stop(); child.Wait(); child.Close() })
	if child.BootProtocol() != "restored" {
		t.Errorf("boot protocol %q", child.BootProtocol())
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, child, at+1000)
	b, _ := child.Memory().Slice(bootsAddr, 8)
	if boots := binary.LittleEndian.Uint64(b); boots != 1 {
		t.Fatalf("the restored machine passed the entry point again (%d starts)", boots)
	}
	if c := counter(t, parent); c != at {
		t.Errorf("the paused parent's counter moved from %d to %d", at, c)
	}
	child.Pause()
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("the restored guest's writes reached the snapshot file")
	}

	// Damaged files are refused with one line, before any VM exists.
	short := filepath.Join(t.TempDir(), "short.snap")
	os.WriteFile(short, before[:len(before)/2], 0o600)
	if _, err := Restore(short, Config{}); !errors.Is(err, snapshot.ErrFormat) {
		t.Errorf("a truncated snapshot: %v", err)
	}
}

// TestForkContinuesAndDiverges: a child forked from a paused machine
// continues the count from the fork point without re-entering; the parent
// resumes and runs on; each then counts alone, neither seeing the other's
// memory.
func TestForkContinuesAndDiverges(t *testing.T) {
	parent := pausedCounter(t, 1000)
	at := counter(t, parent)
	child, err := parent.Fork(Config{})
	if err != nil {
		t.Fatal(err)
	}
	runFromForkPoint(t, child, at)
	if c := counter(t, parent); c != at {
		t.Fatalf("the paused parent's counter moved to %d: it sees the child's writes", c)
	}
	if err := child.Pause(); err != nil {
		t.Fatal(err)
	}
	childAt := counter(t, child)
	if err := parent.Resume(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, parent, at+100)
	if c := counter(t, child); c != childAt {
		t.Fatalf("the paused child's counter moved from %d to %d: it sees the parent's writes", childAt, c)
	}
	b, _ := child.Memory().Slice(bootsAddr, 8)
	if boots := binary.LittleEndian.Uint64(b); boots != 1 {
		t.Fatalf("the child re-entered the guest (%d starts)", boots)
	}
	// A fork of the fork carries the child's count.
	grandchild, err := child.Fork(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grandchild.Stop(); grandchild.Wait(); grandchild.Close() })
	if got := counter(t, grandchild); got != childAt {
		t.Fatalf("the grandchild starts at %d, its parent stood at %d", got, childAt)
	}
	if err := grandchild.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, grandchild, childAt)
}

// TestForkStateHandsOverRAMByFile: the hand-over a child in another VMM
// process gets (a state file without RAM, the sealed memfd) restores a
// child that continues the count while the parent runs on apart; the
// file alone, or a file with RAM given a memfd too, is refused.
func TestForkStateHandsOverRAMByFile(t *testing.T) {
	parent := pausedCounter(t, 1000)
	at := counter(t, parent)
	path := filepath.Join(t.TempDir(), "fork.state")
	ram, err := parent.ForkState(path, []Section{{Name: "caller", Version: 3, Value: "record"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ram.Close()
	if fi, err := os.Stat(path); err != nil || fi.Size() > 1<<20 {
		t.Fatalf("the hand-over file: %v, %v", fi, err)
	}
	if _, err := Restore(path, Config{}); err == nil {
		t.Fatal("a hand-over file without its RAM restored")
	}
	if err := parent.Resume(); err != nil {
		t.Fatal(err)
	}
	child, err := RestoreFork(path, ram, Config{})
	if err != nil {
		t.Fatal(err)
	}
	runFromForkPoint(t, child, at)
	waitAdvance(t, parent, at+1000)
	r, err := snapshot.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var v string
	if err := r.Section("caller", 3, &v); err != nil || v != "record" {
		t.Errorf("the caller's section: %q, %v", v, err)
	}

	full := filepath.Join(t.TempDir(), "full.snap")
	child.Pause()
	if err := child.Snapshot(full, SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreFork(full, ram, Config{}); err == nil {
		t.Error("a snapshot with its own RAM restored over a memfd")
	}
}

// TestSecondForkStateHandsOverItsOverlay: a parent that ran on after a
// fork hands its next child the first fork point and an overlay of what
// it changed since, and the child, restored from them in the way another
// process does, continues from the second fork point.
func TestSecondForkStateHandsOverItsOverlay(t *testing.T) {
	parent := pausedCounter(t, 1000)
	dir := t.TempDir()
	first, err := parent.ForkState(filepath.Join(dir, "first.state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	at := counter(t, parent)
	if err := parent.Resume(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, parent, at+1000)
	parent.Pause()
	at = counter(t, parent)
	path := filepath.Join(dir, "second.state")
	ram, err := parent.ForkState(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ram.Close()
	if ram.Overlay == nil {
		t.Fatal("the second fork handed over no overlay: the parent changed nothing?")
	}
	child, err := RestoreFork(path, ram, Config{})
	if err != nil {
		t.Fatal(err)
	}
	runFromForkPoint(t, child, at)
	if _, err := RestoreFork(path, ForkRAM{Base: ram.Base}, Config{}); err == nil {
		t.Error("a hand-over with runs restored without its overlay")
	}
}

// TestSnapshotAboveTheMMIOHole: RAM above 4 GiB (past the MMIO hole, where
// guest addresses and the memfd's offsets differ) comes back at the same
// guest address.
func TestSnapshotAboveTheMMIOHole(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Setenv("SMOL_ALLOW_PVM", "1")
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, []byte{0xf4, 0xeb, 0xfd}), 0o644)
	m, err := New(Config{Kernel: kernel, CPUs: 1, Memory: 5 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(); m.Wait(); m.Close() })
	const high = 4<<30 + 123<<20
	b, err := m.Memory().Slice(high, 16)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "above the hole")
	m.Start()
	m.Pause()
	path := filepath.Join(t.TempDir(), "big.snap")
	if err := m.Snapshot(path, SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, _ := r.Memory().Slice(high, 16)
	if string(got[:14]) != "above the hole" {
		t.Errorf("restored RAM at %#x holds %q", uint64(high), got)
	}
}

// runFromForkPoint checks that a fork's or restore's child stands at the
// fork point's count, starts it and waits for it to count on; the child
// is closed at the end of the test.
func runFromForkPoint(t *testing.T, child *Machine, at uint64) {
	t.Helper()
	t.Cleanup(func() { child.Stop(); child.Wait(); child.Close() })
	if got := counter(t, child); got != at {
		t.Fatalf("the child's counter is %d, the fork point's %d", got, at)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, child, at+1000)
}

// pausedCounter starts an IN-loop counting guest (inLoopCode), lets it
// count past past and pauses it: the parent of the fork and restore tests.
func pausedCounter(t *testing.T, past uint64) *Machine {
	t.Helper()
	m := tinyMachine(t, inLoopCode)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, m, past)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	return m
}

package smol

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol/machine"
)

// fakeVMM makes VMMExecutable a shell script for the test, and returns a
// machine in a fresh store.
func fakeVMM(t *testing.T, script string) *NamedMachine {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vmm")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := VMMExecutable
	VMMExecutable = bin
	t.Cleanup(func() { VMMExecutable = old })
	st, err := machine.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(st.Path("m", machine.VMMLog)), 0o700); err != nil {
		t.Fatal(err)
	}
	return &NamedMachine{store: st, spec: &machine.Spec{Name: "m"}}
}

// TestAdoptedBootReportsTheVMMsFailure: a boot handed off and adopted
// (through its descriptors, as the shim passes them to another process)
// ends when its VMM process dies, with the VMM's last words, and the
// start lock is free after it.
func TestAdoptedBootReportsTheVMMsFailure(t *testing.T) {
	m := fakeVMM(t, "echo 'smol: this host has no KVM' >&2; exit 1")
	h, err := m.LaunchHandOff()
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := AdoptFiles(h.PID, h.ConsoleBefore, h.Files())
	if err != nil {
		t.Fatal(err)
	}
	b := m.Adopt(context.Background(), adopted)
	if b.PID() != h.PID {
		t.Errorf("the boot's pid is %d, the VMM's %d", b.PID(), h.PID)
	}
	select {
	case <-b.Done():
	case <-time.After(time.Minute):
		t.Fatal("the adopted boot did not end when its VMM exited")
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "this host has no KVM") {
		t.Fatalf("the adopted boot's error: %v; want the VMM's last line", err)
	}
	l, err := m.lockStart()
	if err != nil {
		t.Fatalf("the start lock after the boot ended: %v", err)
	}
	l.Unlock()
}

// TestAdoptedBootIsCancelled: cancelling an adopted boot's context kills
// its VMM process through the pidfd, and the boot ends with the cause.
func TestAdoptedBootIsCancelled(t *testing.T) {
	m := fakeVMM(t, "exec sleep 600")
	h, err := m.LaunchHandOff()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.LaunchHandOff(); err == nil || !strings.Contains(err.Error(), "being started") {
		t.Errorf("a second start while the first boots: %v; want the start lock refused", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := m.Adopt(ctx, h)
	cancel()
	select {
	case <-b.Done():
	case <-time.After(time.Minute):
		t.Fatal("the cancelled boot did not end")
	}
	if err := b.Err(); err != context.Canceled {
		t.Errorf("the cancelled boot's error: %v", err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.PID))
	if err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Errorf("the VMM process still runs after the cancel: %s", stat)
	}
}

func TestAdoptFilesRefusesAnIncompleteHandOff(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		pid   int
		files []*os.File
	}{{0, []*os.File{f, f, f}}, {1, []*os.File{f, f}}, {1, []*os.File{f, nil, f}}} {
		if _, err := AdoptFiles(c.pid, 0, c.files); err == nil {
			t.Errorf("AdoptFiles(%d, %v) accepted", c.pid, c.files)
		}
	}
}

// TestMain lets the test binary stand in for a VMM process
// (startingVMM).
func TestMain(m *testing.M) {
	if len(os.Args) >= 4 && os.Args[1] == "machine" && os.Args[2] == vmmCommand && os.Getenv(startingVMMEnv) == "1" {
		startingVMM(os.Args[3])
		return
	}
	os.Exit(m.Run())
}

// startingVMMEnv makes the test binary, run as a machine's VMM, a VMM
// whose boot never ends: it takes the VMM lock, says Starting in the
// machine's state, as a real one does first, and waits.
const startingVMMEnv = "SMOL_TEST_STARTING_VMM"

func startingVMM(name string) {
	st, err := machineStore()
	if err != nil {
		os.Exit(3)
	}
	if _, err := st.TryLock(name, machine.VMMLock); err != nil {
		os.Exit(4)
	}
	if err := st.SetState(name, machine.Starting, os.Getpid(), time.Now(), ""); err != nil {
		os.Exit(5)
	}
	time.Sleep(10 * time.Minute)
	os.Exit(6)
}

// TestForcedRemoveEndsAStart: `rm -f` of a machine that another command
// is starting (its start lock held while the boot is awaited, here by an
// adopted handoff, as the containerd shim's server holds it) kills the
// VMM, waits for that start to let go, and removes the machine; without
// force it is refused.
func TestForcedRemoveEndsAStart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SMOL_HOME", t.TempDir())
	t.Setenv(startingVMMEnv, "1")
	old := VMMExecutable
	VMMExecutable = exe
	t.Cleanup(func() { VMMExecutable = old })
	st, err := machineStore()
	if err != nil {
		t.Fatal(err)
	}
	spec := &machine.Spec{Name: "m", CPUs: 1, Memory: 256 << 20, Storage: 256 << 20}
	if err := st.Create(spec); err != nil {
		t.Fatal(err)
	}
	m := &NamedMachine{store: st, spec: spec}
	h, err := m.LaunchHandOff()
	if err != nil {
		t.Fatal(err)
	}
	b := m.Adopt(context.Background(), h)
	for i := 0; !st.Alive("m"); i++ {
		if i == 200 {
			t.Fatal("the stand-in VMM never took its lock")
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err := m.Remove(context.Background(), false); err == nil || !strings.Contains(err.Error(), "being started") {
		t.Errorf("a plain remove while the machine starts: %v; want it refused", err)
	}
	if err := m.Remove(context.Background(), true); err != nil {
		t.Fatalf("a forced remove while the machine starts: %v", err)
	}
	if _, err := st.Load("m"); err == nil {
		t.Error("the machine is still recorded after its forced remove")
	}
	select {
	case <-b.Done():
	case <-time.After(time.Minute):
		t.Fatal("the interrupted start never ended")
	}
	if b.Err() == nil {
		t.Error("the interrupted start says the machine runs")
	}
}

func TestIsVMMOf(t *testing.T) {
	if isVMMOf(os.Getpid(), "m") || isVMMOf(0, "m") || isVMMOf(-1, "m") {
		t.Error("a process that is no VMM is taken for one")
	}
}

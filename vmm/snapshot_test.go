package vmm

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/smolvm/smol/snapshot"
)

func TestSnapshotOfAPausedMachine(t *testing.T) {
	m := tinyMachine(t, inLoopCode)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, m, 100)
	path := filepath.Join(t.TempDir(), "m.snap")
	if err := m.Snapshot(path); !errors.Is(err, ErrNotPaused) {
		t.Fatalf("snapshot of a running machine: %v", err)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(path); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(path); !errors.Is(err, os.ErrExist) {
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

package vmm

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/snapshot"
)

// TestMissingFeatures: a guest CPUID made on this host needs nothing it
// lacks; one with a feature bit the host does not offer is named.
func TestMissingFeatures(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	sys, err := kvm.Open()
	if err != nil {
		t.Skip(err)
	}
	defer sys.Close()
	supported, err := sys.SupportedCPUID()
	if err != nil {
		t.Fatal(err)
	}
	own := guestCPUID(supported, 0, 2).Entries
	if m := missingFeatures(own, own); len(m) != 0 {
		t.Fatalf("this host's own guest CPUID lacks %v", m)
	}
	// The guest's own CR4-driven bits are no feature of the host.
	dyn := append([]kvm.CPUIDEntry(nil), own...)
	for i := range dyn {
		if dyn[i].Function == 1 {
			dyn[i].ECX |= 1 << 27
		}
	}
	if m := missingFeatures(dyn, own); len(m) != 0 {
		t.Errorf("OSXSAVE counted as a host feature: %v", m)
	}
	// A feature the host does not offer: the first leaf 7 EBX bit it
	// lacks.
	alien := append([]kvm.CPUIDEntry(nil), own...)
	picked := false
	for i := range alien {
		if alien[i].Function == 7 && alien[i].Index == 0 {
			for b := 0; b < 32 && !picked; b++ {
				if alien[i].EBX&(1<<b) == 0 {
					alien[i].EBX |= 1 << b
					picked = true
				}
			}
		}
	}
	if !picked {
		t.Skip("this host offers every leaf 7 EBX bit")
	}
	m := missingFeatures(alien, own)
	if len(m) != 1 || !strings.Contains(m[0], "0x7.0 EBX") {
		t.Errorf("missing %v, want leaf 7.0 EBX named", m)
	}
}

// TestCheckRestoreHost: a snapshot whose vCPU saw this host's own CPUID
// can be resumed here; one that needs a feature this host lacks, or was
// taken on another vendor's CPU, is a *HostCPUError (the caller's cue to
// boot cold instead).
func TestCheckRestoreHost(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	sys, err := kvm.Open()
	if err != nil {
		t.Skip(err)
	}
	defer sys.Close()
	supported, err := sys.SupportedCPUID()
	if err != nil {
		t.Fatal(err)
	}
	own, err := offeredCPUID(sys, supported) // as a snapshot here saves it
	if err != nil {
		t.Fatal(err)
	}
	write := func(entries []kvm.CPUIDEntry) string {
		p := filepath.Join(t.TempDir(), "s")
		w, err := snapshot.NewWriter(p)
		if err != nil {
			t.Fatal(err)
		}
		w.Section("host", hostSectionVersion, HostState{Arch: runtime.GOARCH})
		w.Section("vcpu.0", vcpuSectionVersion, VCPUState{CPUID: entries})
		if err := w.Commit(bytes.NewReader(nil), 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := CheckRestoreHost(write(own)); err != nil {
		t.Fatalf("a snapshot of this host's own CPUID: %v", err)
	}
	var hostCPU *HostCPUError
	other := append([]kvm.CPUIDEntry(nil), own...)
	for i := range other {
		if other[i].Function == 0 {
			other[i].EBX ^= 0x20202020 // another vendor string
		}
	}
	if err := CheckRestoreHost(write(other)); !errors.As(err, &hostCPU) || !strings.Contains(err.Error(), "CPU") {
		t.Errorf("another vendor: %v", err)
	}
	alien := append([]kvm.CPUIDEntry(nil), own...)
	for i := range alien {
		if alien[i].Function == 7 && alien[i].Index == 0 {
			if alien[i].EBX == ^uint32(0) {
				t.Skip("this host offers every leaf 7 EBX bit")
			}
			alien[i].EBX = ^uint32(0)
		}
	}
	if err := CheckRestoreHost(write(alien)); !errors.As(err, &hostCPU) || !strings.Contains(err.Error(), "lacks") {
		t.Errorf("a feature this host lacks: %v", err)
	}
	if err := CheckRestoreHost(filepath.Join(t.TempDir(), "none")); err == nil || errors.As(err, &hostCPU) {
		t.Errorf("no snapshot: %v", err)
	}
}

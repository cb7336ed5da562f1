package vmm

import (
	"os"
	"strings"
	"testing"

	"github.com/smolvm/smol/kvm"
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

package kvm

import "testing"

// TestStatsCountExits checks that KVM's own counters follow the guest: two
// port writes are at least two exits in the vCPU's "exits" statistic (at
// least: with hardware virtualization the first touch of guest memory adds
// nested page faults; PVM does not count these writes as "exits").
func TestStatsCountExits(t *testing.T) {
	// out 0x10,al; out 0x10,al; hlt
	g := newGuest(t, modeLong64, []byte{0xe6, 0x10, 0xe6, 0x10, 0xf4})
	before := statValue(t, g.vcpu, "exits")
	g.run(t, ExitIO)
	g.run(t, ExitIO)
	if got := statValue(t, g.vcpu, "exits") - before; got < 2 {
		t.Fatalf("exits grew by %d over two port writes, want at least 2", got)
	}
	vmStats, err := g.vm.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(vmStats) == 0 {
		t.Fatal("the VM has no statistics")
	}
}

func statValue(t *testing.T, v *VCPU, name string) uint64 {
	t.Helper()
	stats, err := v.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no vCPU statistic %q among %d", name, len(stats))
	return 0
}

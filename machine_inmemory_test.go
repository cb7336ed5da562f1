package smol

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A machine in memory is recorded with neither image nor writable layer,
// refuses what would need them, and its root disks are none.
func TestMachineInMemory(t *testing.T) {
	t.Setenv("SMOL_HOME", t.TempDir())
	ctx := context.Background()
	for _, c := range []struct {
		cfg  MachineConfig
		want string
	}{
		{MachineConfig{Name: "a", InMemory: true, Image: "busybox"}, "no image"},
		{MachineConfig{Name: "b", InMemory: true, Storage: 1 << 30}, "no writable layer"},
		{MachineConfig{Name: "c", InMemory: true, From: "x.smolmachine"}, "pack"},
	} {
		if _, err := CreateMachine(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
	m, err := CreateMachine(ctx, MachineConfig{Name: "mem", InMemory: true, CPUs: 1, Memory: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// Read back from its record, as every later command sees it.
	m, err = OpenMachine("mem")
	if err != nil {
		t.Fatal(err)
	}
	if !m.spec.InMemory || m.spec.Image != nil || m.spec.Storage != 0 {
		t.Errorf("recorded as in memory %v, image %+v, storage %d", m.spec.InMemory, m.spec.Image, m.spec.Storage)
	}
	if s, err := m.Status(ctx); err != nil || s.Image != InMemoryRoot {
		t.Errorf("status: image %q (%v), want %q", s.Image, err, InMemoryRoot)
	}
	disks, cmdline, err := rootDisks(m.store, m.spec)
	if err != nil || len(disks) != 0 || cmdline != "" {
		t.Errorf("root disks %+v, command line %q (%v), want none", disks, cmdline, err)
	}
	if _, err := os.Stat(m.store.StoragePath("mem")); !os.IsNotExist(err) {
		t.Errorf("a writable layer was made: %v", err)
	}
	for what, err := range map[string]error{
		"snapshot": m.Snapshot(ctx, filepath.Join(t.TempDir(), "s"), true),
		"pack":     m.packInto(ctx, &packInput{cleanup: func() {}}, false),
	} {
		if err == nil || !strings.Contains(err.Error(), "runs in memory") {
			t.Errorf("%s: %v, want a refusal saying it runs in memory", what, err)
		}
	}
	if _, err := m.Fork(ctx, ForkOptions{Count: 1}); err == nil || !strings.Contains(err.Error(), "runs in memory") {
		t.Errorf("fork: %v, want a refusal saying it runs in memory", err)
	}
	if err := m.Remove(ctx, false); err != nil {
		t.Fatal(err)
	}
}

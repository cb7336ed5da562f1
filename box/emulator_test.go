package box

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEmulatorUnpackedBesideTheSystemsUsesItsOwnDataAndModules(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "usr", "bin", qemuBinary)
	data := filepath.Join(root, "usr", "share", "qemu")
	mods := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu", "qemu")
	for _, d := range []string{filepath.Dir(bin), data, mods} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'QEMU emulator version 99.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(boxQEMUEnv, bin)
	e, err := findEmulator()
	if err != nil {
		t.Fatal(err)
	}
	if e.binary != bin || !slices.Equal(e.args, []string{"-L", data}) || !slices.Equal(e.env, []string{"QEMU_MODULE_DIR=" + mods}) {
		t.Fatalf("emulator %+v, want %s with -L %s and its modules %s", e, bin, data, mods)
	}
	if got, want := Emulator(), "QEMU emulator version 99.0 ("+bin+")"; got != want {
		t.Fatalf("Emulator() = %q, want %q", got, want)
	}
}

func TestEmulatorChoices(t *testing.T) {
	t.Setenv(boxQEMUEnv, filepath.Join(t.TempDir(), "no-such-qemu"))
	if _, err := findEmulator(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a missing %s: %v, want ErrUnavailable", boxQEMUEnv, err)
	}
	// Without it, the one on PATH, alone.
	dir := t.TempDir()
	fake := filepath.Join(dir, qemuBinary)
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv(boxQEMUEnv, "")
	if e, err := findEmulator(); err != nil || e.binary != fake || e.args != nil || e.env != nil {
		t.Fatalf("no %s: %+v, %v; want %s alone", boxQEMUEnv, e, err, fake)
	}
}

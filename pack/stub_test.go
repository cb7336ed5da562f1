package pack

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRunner stands for the smol binary a stub copies.
func fakeRunner(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "smol")
	if err := os.WriteFile(p, bytes.Repeat([]byte("\x7fELF runner "), 5000), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStubSidecar: a stub is the runner byte for byte plus a trailer
// naming its sidecar, which it opens only while it is the same pack.
func TestStubSidecar(t *testing.T) {
	dir := t.TempDir()
	runner := fakeRunner(t, dir)
	p := writePack(t, dir, "vm.smolmachine", false)
	stub := filepath.Join(dir, "vm")
	if err := WriteStub(stub, runner, p, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteStub(stub, runner, p, false); !errors.Is(err, os.ErrExist) {
		t.Errorf("a second stub over the first: %v", err)
	}
	sb, _ := os.ReadFile(stub)
	rb, _ := os.ReadFile(runner)
	if !bytes.HasPrefix(sb, rb) {
		t.Fatal("the stub does not start with the runner")
	}
	if fi, _ := os.Stat(stub); fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("the stub is not executable: %v", fi.Mode())
	}
	s, err := ReadStub(stub)
	if err != nil || s.Sidecar != "vm.smolmachine" {
		t.Fatalf("ReadStub: %+v, %v", s, err)
	}
	r, err := OpenStub(stub, s)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := ReadStub(runner); !errors.Is(err, ErrNoStub) {
		t.Errorf("the runner read as a stub: %v", err)
	}

	// A stub of a stub carries one trailer: the runner is not doubled.
	stub2 := filepath.Join(dir, "vm2")
	if err := WriteStub(stub2, stub, p, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(stub2); !bytes.Equal(b, sb) {
		t.Error("a stub made from a stub differs from one made from the runner")
	}

	// Another pack under the sidecar's name: refused, named.
	other := filepath.Join(t.TempDir(), "other.smolmachine")
	m := testManifest()
	m.Machine.CPUs = 3
	w, _ := Create(other, m)
	for _, n := range []string{Kernel, Agent, Root} {
		w.Add(n, strings.NewReader("x"), 1)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	os.Rename(other, p)
	if _, err := OpenStub(stub, s); err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Errorf("a swapped sidecar: %v", err)
	}
	os.Remove(p)
	if _, err := OpenStub(stub, s); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing sidecar: %v", err)
	}
}

// TestStubSingleFile: with the pack inside, the stub alone is the whole
// artifact; a damaged trailer is refused, not followed.
func TestStubSingleFile(t *testing.T) {
	dir := t.TempDir()
	runner := fakeRunner(t, dir)
	p := writePack(t, dir, "vm.smolmachine", false)
	stub := filepath.Join(dir, "one")
	if err := WriteStub(stub, runner, p, true); err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	s, err := ReadStub(stub)
	if err != nil || s.Sidecar != "" {
		t.Fatalf("ReadStub: %+v, %v", s, err)
	}
	r, err := OpenStub(stub, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err != nil {
		t.Error(err)
	}
	r.Close()

	b, _ := os.ReadFile(stub)
	for name, f := range map[string]func([]byte) []byte{
		"json":   func(b []byte) []byte { return bytes.Replace(b, []byte(`"format"`), []byte(`"f0rmat"`), 1) },
		"length": func(b []byte) []byte { b[len(b)-12] ^= 0x40; return b },
		"offset": func(b []byte) []byte { return bytes.Replace(b, []byte(`"offset":`), []byte(`"offset":9`), 1) },
	} {
		bad := filepath.Join(dir, "bad-"+name)
		os.WriteFile(bad, f(append([]byte(nil), b...)), 0o755)
		s, err := ReadStub(bad)
		if err == nil {
			_, err = OpenStub(bad, s)
		}
		if err == nil || errors.Is(err, ErrNoStub) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

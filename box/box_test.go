package box

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJobScriptQuotesEnvironmentAndDirectory(t *testing.T) {
	s := jobScript("echo hi", Options{Dir: "/tmp/a b", Env: []string{"A=it's", "BAD-NAME=x", "B=$HOME", "noequals"}})
	for _, want := range []string{`export A='it'\''s'`, `export B='$HOME'`, `cd '/tmp/a b' || exit 125`, "export SMOL_IN_BOX=1", "echo hi"} {
		if !strings.Contains(s, want) {
			t.Errorf("job script lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "BAD-NAME") || strings.Contains(s, "noequals") {
		t.Errorf("job script exports an invalid name:\n%s", s)
	}
}

// TestBoxSharesHostFilesAndReturnsStatus boots a real box.
func TestBoxSharesHostFilesAndReturnsStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the box")
	}
	if _, err := Kernel(); err != nil {
		t.Fatalf("%v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "input"), []byte("written-on-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code, err := Run(context.Background(),
		`echo "inside $(pwd)"; test -c /dev/kvm && echo kvm-present; cat input; echo made-in-box > output; exit 7`,
		Options{Dir: dir, Stdout: &out, Env: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Fatalf("exit status %d, want 7; output:\n%s", code, out.String())
	}
	got, err := os.ReadFile(filepath.Join(dir, "output"))
	if err != nil || string(got) != "made-in-box\n" {
		t.Fatalf("file written in the box: %q, %v", got, err)
	}
	for _, want := range []string{"inside " + dir, "kvm-present", "written-on-host"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("box output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestHostTSCkHzNeedsConstantTSC(t *testing.T) {
	cpu := "processor\t: 0\ncpu MHz\t\t: 2596.138\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n\nprocessor\t: 1\ncpu MHz\t\t: 1.0\n"
	if khz, ok := hostTSCkHz(strings.NewReader(cpu)); !ok || khz != 2596138 {
		t.Errorf("hostTSCkHz = %d, %v; want 2596138, true", khz, ok)
	}
	variable := strings.Replace(cpu, " constant_tsc", "", 1)
	if khz, ok := hostTSCkHz(strings.NewReader(variable)); ok {
		t.Errorf("hostTSCkHz without constant_tsc = %d, true; want not ok", khz)
	}
	if _, ok := hostTSCkHz(strings.NewReader("flags\t: constant_tsc\n")); ok {
		t.Error("hostTSCkHz without cpu MHz is ok; want not ok")
	}
}

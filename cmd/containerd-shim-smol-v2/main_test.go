package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestCgoBuildWithPluginLoaderRefusesToRun: a cgo build that links Go's
// plugin package says so in one line and exits 1 before doing anything
// (pluginbuild.go); with -tags static_build the plugin package is not
// linked, so a cgo build made that way (CGO_ENABLED=1 make build) is safe.
func TestCgoBuildWithPluginLoaderRefusesToRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the shim twice")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("containerd selects its plugin loader on amd64 only")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("cgo builds need gcc")
	}
	cgoEnv := append(os.Environ(), "CGO_ENABLED=1")
	deps := func(tags string) []string {
		cmd := exec.Command("go", "list", "-deps", "-tags", tags, ".")
		cmd.Env = cgoEnv
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	if !slices.Contains(deps(""), "plugin") {
		t.Fatal("a cgo build no longer links the plugin package: pluginbuild.go's constraints are out of date")
	}
	if slices.Contains(deps("static_build"), "plugin") {
		t.Fatal("a cgo build with -tags static_build links the plugin package")
	}
	dir := t.TempDir()
	run := func(tags string) (string, int) {
		bin := filepath.Join(dir, "shim"+tags)
		build := exec.Command("go", "build", "-tags", tags, "-o", bin, ".")
		build.Env = cgoEnv
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
		}
		cmd := exec.Command(bin, "machine", "__vmm", "no-such-machine")
		cmd.Env = append(os.Environ(), "SMOL_HOME="+filepath.Join(dir, "home"))
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	out, code := run("")
	if code != 1 || !strings.Contains(out, "CGO_ENABLED=0") || strings.Count(out, "\n") != 1 {
		t.Errorf("the cgo build with the plugin package exited %d saying %q; want 1 and one line naming CGO_ENABLED=0", code, out)
	}
	if out, _ := run("static_build"); strings.Contains(out, "plugin") {
		t.Errorf("the cgo build with -tags static_build refused to run: %q", out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

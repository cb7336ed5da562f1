package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Portable machines: smol pack create, machine create --from, and the
// runnable stub, through the CLI, with Linux guests in the box.

// stubCLI runs the stub at path with SMOL_HOME=home.
func stubCLI(t *testing.T, home, path string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), smolRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = commandWaitDelay
	cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %v; stderr: %s", path, args, smolRunTimeout, e.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, o.String(), e.String()
}

// mustStub runs a stub command that must succeed.
func mustStub(t *testing.T, home, path string, args ...string) string {
	t.Helper()
	code, out, stderr := stubCLI(t, home, path, args...)
	if code != 0 {
		t.Fatalf("%s %v: exit %d, stderr: %s", filepath.Base(path), args, code, stderr)
	}
	return out
}

func mustSmol(t *testing.T, home string, args ...string) string {
	t.Helper()
	code, out, stderr, hung := smolRunOnce(t, home, nil, false, args...)
	if hung || code != 0 {
		t.Fatalf("smol %v: exit %d (hung %v), stderr: %s", args, code, hung, stderr)
	}
	return out
}

// TestPackMachine: a machine that an exec changed (a file, some state on
// disk), packed and taken to a fresh SMOL_HOME with its registry gone,
// is the same machine there: through machine create --from, through the
// stub's throwaway run, and through the stub's own named machine.
func TestPackMachine(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	reg := newTestRegistry(t)
	ref := reg.push(t, "test/pack", image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t)))
	mustMachine(t, home, "create", "src", "--image", ref, "--cpus", "1", "--mem", "256M", "--storage", "1G",
		"-e", "FROM_MACHINE=m1", "-w", "/root")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "src") })
	startMachine(t, home, "src")
	mustMachine(t, home, "exec", "src", "--", "sh", "-c", "echo packed > /root/file; mkdir -p /srv/state; echo 42 > /srv/state/n; sync")
	mustMachine(t, home, "stop", "src")
	stub := filepath.Join(dir, "agentvm")
	if code, _, stderr, _ := smolRunOnce(t, home, nil, false, "pack", "create", "--from-machine", "src", "-o", stub); code != 0 {
		t.Fatalf("pack create: exit %d: %s", code, stderr)
	}
	mustSmol(t, home, "pack", "create", "--from-machine", "src", "-o", stub, "-e", "FROM_PACK=p2", "--force")
	reg.stop()
	if out := mustSmol(t, home, "pack", "verify", stub+".smolmachine"); !strings.Contains(out, "ok") {
		t.Errorf("pack verify: %q", out)
	}

	fresh := t.TempDir()
	mustMachine(t, fresh, "create", "copy", "--from", stub+".smolmachine")
	t.Cleanup(func() { machineCLI(t, fresh, "rm", "-f", "copy") })
	startMachine(t, fresh, "copy")
	if out := mustMachine(t, fresh, "exec", "copy", "--", "cat", "/root/file", "/srv/state/n"); out != "packed\n42\n" {
		t.Errorf("the copy's files: %q", out)
	}
	if out := mustMachine(t, fresh, "exec", "copy", "--", "sh", "-c", `echo "$FROM_MACHINE $FROM_PACK"; pwd`); out != "m1 p2\n/root\n" {
		t.Errorf("the copy's env and workdir: %q", out)
	}
	mustMachine(t, fresh, "stop", "copy")
	if _, err := os.Stat(filepath.Join(fresh, "images")); err == nil {
		if entries, _ := os.ReadDir(filepath.Join(fresh, "images")); len(entries) > 0 {
			t.Errorf("the copy needed an image cache: %v", entries)
		}
	}

	// The stub: a throwaway run sees the packed layer and leaves nothing.
	if out := mustStub(t, fresh, stub, "run", "--", "cat", "/root/file"); out != "packed\n" {
		t.Errorf("./agentvm run: %q", out)
	}
	if out := mustStub(t, fresh, stub, "run", "--", "sh", "-c", "echo changed > /root/file; cat /root/file"); out != "changed\n" {
		t.Errorf("./agentvm run writing: %q", out)
	}
	if out := mustStub(t, fresh, stub, "run", "--", "cat", "/root/file"); out != "packed\n" {
		t.Errorf("a throwaway run's change stayed: %q", out)
	}
	// ... and its machine, named after it, lives across commands.
	code, _, stderr := stubCLI(t, fresh, stub, "start")
	if code != 0 && strings.Contains(stderr, "did not start") {
		t.Logf("KNOWN ISSUE: ./agentvm start: %s; once more", stderr)
		code, _, stderr = stubCLI(t, fresh, stub, "start")
	}
	if code != 0 {
		t.Fatalf("./agentvm start: exit %d: %s", code, stderr)
	}
	t.Cleanup(func() { machineCLI(t, fresh, "rm", "-f", "agentvm") })
	mustStub(t, fresh, stub, "exec", "--", "sh", "-c", "echo 43 > /srv/state/n")
	if out := mustStub(t, fresh, stub, "exec", "--", "cat", "/srv/state/n"); out != "43\n" {
		t.Errorf("./agentvm exec: %q", out)
	}
	var st struct{ State string }
	json.Unmarshal([]byte(mustStub(t, fresh, stub, "status", "--json")), &st)
	if st.State != "running" {
		t.Errorf("./agentvm status: %q", st.State)
	}
	mustStub(t, fresh, stub, "stop")
}

// TestPackLive: a machine packed with --live, made again on a fresh
// SMOL_HOME, continues the count a process was keeping in it; the
// machine it was packed from runs on.
func TestPackLive(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	countingMachine(t, home, "live")
	stub := filepath.Join(dir, "lv")
	before := counter(t, home, "live")
	mustSmol(t, home, "pack", "create", "--from-machine", "live", "--live", "-o", stub)
	after := counter(t, home, "live")
	time.Sleep(time.Second)
	if c := counter(t, home, "live"); c <= after {
		t.Errorf("the packed machine stopped counting at %d", after)
	}
	mustMachine(t, home, "stop", "live")

	fresh := t.TempDir()
	mustMachine(t, fresh, "create", "copy", "--from", stub+".smolmachine")
	t.Cleanup(func() { machineCLI(t, fresh, "rm", "-f", "copy") })
	mustMachine(t, fresh, "start", "copy")
	c1 := counter(t, fresh, "copy") // it ran on a moment between the pack and the restore
	if c1 < before || c1 > after+10 {
		t.Errorf("the copy's counter is %d, the machine's was between %d and %d when packed", c1, before, after)
	}
	time.Sleep(time.Second)
	if c2 := counter(t, fresh, "copy"); c2 <= c1 {
		t.Errorf("the copy's counter is stuck at %d", c1)
	}
	if _, err := os.Stat(filepath.Join(fresh, "machines", "copy", "live.smolsnap")); err == nil {
		t.Error("the live state is still kept after it was resumed")
	}
}

// TestPackReproducibleAndBadInput: two packs of one image are the same
// bytes (even from two caches); damaged, truncated, foreign and
// mismatched artifacts and bad requests are refused with one line and
// leave nothing behind.
func TestPackReproducibleAndBadInput(t *testing.T) {
	dir := t.TempDir()
	img := imageTarball(t, dir)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	mustSmol(t, t.TempDir(), "pack", "create", "--image", img, "-o", a, "-e", "K=V")
	mustSmol(t, t.TempDir(), "pack", "create", "--image", img, "-o", b, "-e", "K=V")
	pa, _ := os.ReadFile(a + ".smolmachine")
	pb, _ := os.ReadFile(b + ".smolmachine")
	if len(pa) == 0 || !bytes.Equal(pa, pb) {
		t.Fatalf("two packs of one image differ (%d and %d bytes)", len(pa), len(pb))
	}

	home := t.TempDir()
	refused := func(want string, run func() (int, string, string)) {
		t.Helper()
		code, _, stderr := run()
		if code == 0 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("exit %d, stderr %q, want one line with %q", code, stderr, want)
		}
	}
	smolCmd := func(args ...string) func() (int, string, string) {
		return func() (int, string, string) {
			code, out, stderr, _ := smolRunOnce(t, home, nil, false, args...)
			return code, out, stderr
		}
	}
	bad := func(name string, f func([]byte) []byte) string {
		p := filepath.Join(dir, name+".smolmachine")
		os.WriteFile(p, f(append([]byte(nil), pa...)), 0o644)
		return p
	}
	var m struct {
		Sections []struct {
			Name           string
			Offset, Length int64
		}
	}
	json.Unmarshal([]byte(mustSmol(t, home, "pack", "inspect", "--json", a+".smolmachine")), &m)
	data := int64(20 + binary.LittleEndian.Uint32(pa[12:]))
	if len(m.Sections) != 3 {
		t.Fatalf("inspect: %+v", m)
	}
	for _, s := range m.Sections {
		p := bad("flip-"+s.Name, func(b []byte) []byte { b[data+s.Offset+s.Length/2] ^= 0x10; return b })
		refused("section "+s.Name, smolCmd("machine", "create", "x", "--from", p))
		refused("section "+s.Name, smolCmd("pack", "verify", p))
	}
	refused("outside the file", smolCmd("machine", "create", "x", "--from", bad("short", func(b []byte) []byte { return b[:len(b)-1000] })))
	refused("format version 7", smolCmd("machine", "create", "x", "--from", bad("v7", func(b []byte) []byte { b[8] = 7; return b })))
	refused("no SMOLPACK magic", smolCmd("machine", "create", "x", "--from", img))
	refused("no such file", smolCmd("machine", "create", "x", "--from", filepath.Join(dir, "none")))
	for _, sub := range []string{"machines", "packs"} {
		entries, _ := os.ReadDir(filepath.Join(home, sub))
		if len(entries) > 0 {
			t.Errorf("refused packs left %s/%v", sub, entries)
		}
	}

	// One file: the pack inside its stub, which alone makes the machine.
	single := filepath.Join(t.TempDir(), "single")
	mustSmol(t, home, "pack", "create", "--image", img, "-o", single, "--single-file", "-e", "K=V")
	if _, err := os.Stat(single + ".smolmachine"); err == nil {
		t.Error("--single-file wrote a sidecar")
	}
	if out := mustStub(t, home, single, "verify"); !strings.Contains(out, "ok") {
		t.Errorf("./single verify: %q", out)
	}
	mustSmol(t, home, "machine", "create", "one", "--from", single)
	mustSmol(t, home, "machine", "rm", "one")
	os.RemoveAll(filepath.Join(home, "packs"))

	// A stub whose sidecar is another pack's.
	other := filepath.Join(dir, "other")
	mustSmol(t, home, "pack", "create", "--image", img, "-o", other, "--cpus", "2")
	os.Rename(other+".smolmachine", a+".smolmachine")
	refused("do not match", func() (int, string, string) { return stubCLI(t, home, a, "start") })
	refused("do not match", func() (int, string, string) { return stubCLI(t, home, a, "run", "--", "true") })

	// Bad requests.
	refused("already exists", smolCmd("pack", "create", "--image", img, "-o", b))
	refused("no such machine", smolCmd("pack", "create", "--from-machine", "nobody", "-o", filepath.Join(dir, "n1")))
	refused("", smolCmd("pack", "create", "--image", filepath.Join(dir, "no-such.tar"), "-o", filepath.Join(dir, "n2")))
	refused("--live", smolCmd("pack", "create", "--image", img, "--live", "-o", filepath.Join(dir, "n3")))
	for _, n := range []string{"n1", "n2", "n3"} {
		if matches, _ := filepath.Glob(filepath.Join(dir, n+"*")); len(matches) > 0 {
			t.Errorf("a refused pack left %v", matches)
		}
	}
	// A full disk while packing leaves no partial artifact.
	full := filepath.Join(dir, "full")
	os.Mkdir(full, 0o700)
	if err := syscall.Mount("tmpfs", full, "tmpfs", 0, "size=2m"); err != nil {
		t.Logf("no tmpfs to fill (%v): the full-disk case is not checked", err)
		return
	}
	defer syscall.Unmount(full, 0)
	refused("no space left", smolCmd("pack", "create", "--image", img, "-o", filepath.Join(full, "vm")))
	if entries, _ := os.ReadDir(full); len(entries) > 0 {
		t.Errorf("a pack that filled the disk left %v", entries)
	}
}

// imageTarball writes a busybox image as a docker-save tarball.
func imageTarball(t *testing.T, dir string) string {
	t.Helper()
	return writeTarball(t, filepath.Join(dir, "img.tar"), image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t)))
}

func writeTarball(t *testing.T, path string, img v1.Image) string {
	t.Helper()
	ref, _ := name.ParseReference("test/pack:1")
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		t.Fatal(err)
	}
	return path
}

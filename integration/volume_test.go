package integration

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smolvm/smol"
)

// Host directories in the guest (-v), through the CLI, with Linux guests
// in the box.

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestVolumeBothWays: a file the host wrote reads the same in the guest,
// one the guest writes lands on the host the same, checksummed; a
// read-only volume refuses the guest's writes; a directory of 10,000
// files lists whole (its entries read, in order: the shell's glob; a stat
// of every one, which ls does, is the open cost recorded in README's
// known issues and is not what this checks).
func TestVolumeBothWays(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	blob := make([]byte, 3<<20+123)
	rand.Read(blob)
	os.WriteFile(filepath.Join(dir, "host.bin"), blob, 0o644)
	many := filepath.Join(dir, "many")
	os.Mkdir(many, 0o755)
	for i := 0; i < 10000; i++ {
		os.WriteFile(filepath.Join(many, fmt.Sprintf("f%05d", i)), nil, 0o644)
	}
	script := "sha256sum /work/host.bin | cut -d' ' -f1; head -c 2097152 /dev/urandom > /work/guest.bin; sha256sum /work/guest.bin | cut -d' ' -f1; set -- /work/many/*; echo $# ${1##*/} ${10000##*/}"
	code, out, stderr := smolRun(t, home, nil, "run", "--mem", "256M", "--cpus", "1", "-v", dir+":/work", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	lines := strings.Fields(out)
	if len(lines) != 5 {
		t.Fatalf("the guest printed %q", out)
	}
	if lines[0] != fileSum(t, filepath.Join(dir, "host.bin")) {
		t.Errorf("the guest read the host's file as %s", lines[0])
	}
	if lines[1] != fileSum(t, filepath.Join(dir, "guest.bin")) {
		t.Errorf("the host reads the guest's file differently (guest %s)", lines[1])
	}
	if lines[2] != "10000" || lines[3] != "f00000" || lines[4] != "f09999" {
		t.Errorf("the guest lists %s of 10000 files, from %s to %s", lines[2], lines[3], lines[4])
	}

	code, _, stderr = smolRun(t, home, nil, "run", "--mem", "256M", "--cpus", "1", "-v", dir+":/work:ro", "--", "sh", "-c", "echo x > /work/new && rm /work/host.bin")
	if code == 0 || !strings.Contains(stderr, "Read-only") {
		t.Errorf("a write to a read-only volume: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("a read-only volume took a new file")
	}
	if _, err := os.Stat(filepath.Join(dir, "host.bin")); err != nil {
		t.Error("a read-only volume lost a file")
	}
}

// TestVolumeHoldsTheGuestIn: what a hostile guest makes in a volume
// (absolute and relative symlinks out of it, hard links, device nodes,
// FIFOs) never reaches outside the directory on the host.
func TestVolumeHoldsTheGuestIn(t *testing.T) {
	home, dir, outside := t.TempDir(), t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("host only"), 0o600)
	rel, _ := filepath.Rel(dir, secret)
	script := strings.Join([]string{
		"ln -s " + secret + " /work/abs",
		"ln -s " + rel + " /work/rel",
		"cat /work/abs /work/rel 2>/dev/null",
		"echo overwrite > /work/abs 2>/dev/null",
		"ln /etc/passwd /work/hard 2>/dev/null || echo no-hardlink",
		"mknod /work/null c 1 3 2>/dev/null || echo no-mknod",
		"mkfifo /work/fifo 2>/dev/null || echo no-fifo",
		"true",
	}, "; ")
	code, out, stderr := smolRun(t, home, nil, "run", "--mem", "256M", "--cpus", "1", "-v", dir+":/work", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	if strings.Contains(out, "host only") {
		t.Fatalf("the guest read a host file outside the volume through a symlink: %q", out)
	}
	for _, want := range []string{"no-hardlink", "no-mknod", "no-fifo"} {
		if !strings.Contains(out, want) {
			t.Errorf("the guest's %s succeeded: %q", want, out)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "host only" {
		t.Errorf("the file outside the volume now reads %q", b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Type()&(os.ModeDevice|os.ModeNamedPipe|os.ModeCharDevice) != 0 {
			t.Errorf("the guest made %s (%v) on the host", e.Name(), e.Type())
		}
	}
}

// TestVolumeMachineAndBadInput: a machine's volume is there at every
// start; fork and snapshot of it are refused; bad -v values are refused
// before anything boots, with one line.
func TestVolumeMachineAndBadInput(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "seen"), []byte("from the host\n"), 0o644)
	mustMachine(t, home, "create", "vol", "--cpus", "1", "--mem", "256M", "--storage", "1G", "-v", dir+":/data")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "vol") })
	startMachine(t, home, "vol")
	if out := mustMachine(t, home, "exec", "vol", "--", "cat", "/data/seen"); out != "from the host\n" {
		t.Errorf("/data/seen = %q", out)
	}
	mustMachine(t, home, "exec", "vol", "--", "sh", "-c", "echo from the guest > /data/back")
	if b, _ := os.ReadFile(filepath.Join(dir, "back")); string(b) != "from the guest\n" {
		t.Errorf("the host reads %q", b)
	}
	refused := func(want string, code int, stderr string) {
		t.Helper()
		if code == 0 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("exit %d, stderr %q, want one line with %q", code, stderr, want)
		}
	}
	code, _, stderr := machineCLI(t, home, "fork", "vol")
	refused("host directories", code, stderr)
	code, _, stderr = machineCLI(t, home, "snapshot", "vol", "-o", filepath.Join(t.TempDir(), "s"))
	refused("host directories", code, stderr)

	for _, c := range []struct{ want, v string }{
		{"no such file", filepath.Join(dir, "missing") + ":/x"},
		{"clean absolute path", dir + ":relative"},
		{"HOST:GUEST", dir},
		{"not a directory", filepath.Join(dir, "seen") + ":/x"},
		{"not under /proc", dir + ":/proc/x"},
	} {
		code, _, stderr, _ := smolRunOnce(t, home, nil, false, "run", "-v", c.v, "--", "true")
		refused(c.want, code, stderr)
	}
	code, _, stderr, _ = smolRunOnce(t, home, nil, false, "run", "-v", dir+":/a", "-v", dir+":/a", "--", "true")
	refused("twice", code, stderr)
}

// euidProgram is a static x86-64 Linux program of 136 bytes that exits
// with its effective uid (mod 256): geteuid, then exit with it. A
// setuid-root copy of it says whether a mount honours setuid bits.
func euidProgram() []byte {
	le := binary.LittleEndian
	code := []byte{
		0xb8, 107, 0, 0, 0, // mov eax, SYS_geteuid
		0x0f, 0x05, // syscall
		0x89, 0xc7, // mov edi, eax
		0xb8, 60, 0, 0, 0, // mov eax, SYS_exit
		0x0f, 0x05, // syscall
	}
	const base, headers = 0x400000, 64 + 56
	size := uint64(headers + len(code))
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2)    // ET_EXEC
	b = le.AppendUint16(b, 0x3e) // x86-64
	b = le.AppendUint32(b, 1)
	b = le.AppendUint64(b, base+headers) // entry: the code
	b = le.AppendUint64(b, 64)           // program headers
	b = le.AppendUint64(b, 0)            // no sections
	b = le.AppendUint32(b, 0)
	b = le.AppendUint16(b, 64)
	b = le.AppendUint16(b, 56)
	b = le.AppendUint16(b, 1)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = le.AppendUint32(b, 1) // PT_LOAD of the whole file
	b = le.AppendUint32(b, 5) // R+X
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, size)
	b = le.AppendUint64(b, size)
	b = le.AppendUint64(b, 0x1000)
	return append(b, code...)
}

// TestVolumeSetuid: in a volume given Setuid (the shim's container
// roots), a setuid-root program run by uid 1000 runs as root, unless
// the command has no_new_privs; in a plain volume it runs as the user
// (nosuid); and a chmod u+s from the guest never makes a setuid file on
// the host.
func TestVolumeSetuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test's setuid-root program must be root's")
	}
	home := t.TempDir()
	t.Setenv("SMOL_HOME", home)
	smol.VMMExecutable = artifact(t, "bin/smol", "build")
	suid, plain := t.TempDir(), t.TempDir()
	for _, dir := range []string{suid, plain} {
		p := filepath.Join(dir, "euid")
		if err := os.WriteFile(p, euidProgram(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755|os.ModeSetuid); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	m, err := smol.CreateMachine(ctx, smol.MachineConfig{Name: "suid", Image: machineImage(t), CPUs: 1, Memory: 256 << 20, Storage: 256 << 20,
		Volumes: []smol.Volume{{Host: suid, Guest: "/s", Setuid: true}, {Host: plain, Guest: "/n"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Remove(ctx, true)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	run := func(noNewPrivs bool, script string) string {
		var out strings.Builder
		code, err := m.Exec(ctx, smol.Command{Args: []string{"sh", "-c", script}, User: "1000:1000", NoNewPrivileges: noNewPrivs, Stdout: &out, Stderr: &out})
		if err != nil || code != 0 {
			t.Fatalf("exec %q: %d %v: %s", script, code, err, out.String())
		}
		return out.String()
	}
	if got := run(false, "/s/euid; echo $?; /n/euid; echo $?"); got != "0\n232\n" {
		t.Errorf("effective uids (exit statuses) in the setuid volume and the plain one: %q, want 0 and 232 (1000)", got)
	}
	if got := run(true, "/s/euid; echo $?"); got != "232\n" {
		t.Errorf("with no_new_privs the setuid program ran with euid %q, want 232 (1000)", got)
	}
	var out strings.Builder
	if code, err := m.Exec(ctx, smol.Command{Args: []string{"sh", "-c", "touch /s/made /n/made && chmod 6755 /s/made /n/made; ls -l /s/made"}, Stdout: &out, Stderr: &out}); err != nil || code != 0 {
		t.Fatalf("chmod in the guest: %d %v %s", code, err, out.String())
	}
	for _, dir := range []string{suid, plain} {
		fi, err := os.Stat(filepath.Join(dir, "made"))
		if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("the guest's chmod 6755 on the host: %v, %v (guest: %q)", fi.Mode(), err, out.String())
		}
	}
}

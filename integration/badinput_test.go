package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smolvm/smol/internal/testkernel"
	"github.com/smolvm/smol/virtio/blk"
)

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectOneLineError runs smol and checks the exit code and that stderr is
// one line mentioning want, with no Go panic or stack trace.
func expectOneLineError(t *testing.T, wantCode int, want string, args ...string) {
	t.Helper()
	code, _, stderr := smolCLI(t, args...)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != wantCode || len(lines) != 1 || !strings.Contains(strings.ToLower(stderr), strings.ToLower(want)) ||
		strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
		t.Fatalf("smol %v: exit %d, stderr %q; want exit %d and one line containing %q", args, code, stderr, wantCode, want)
	}
}

func TestBadInputGivesOneClearLine(t *testing.T) {
	vmlinux := artifact(t, "build/vmlinux", "kernel")
	head := make([]byte, 200)
	f, err := os.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	f.Read(head)
	f.Close()
	text := writeFile(t, "notes.txt", []byte("this is not a kernel\n"))
	truncated := writeFile(t, "truncated", head)
	arm := writeFile(t, "arm64", testkernel.ELF(testkernel.MachineAArch64, []byte{0, 0, 0, 0}))
	bigInitrd := filepath.Join(t.TempDir(), "big.cpio")
	if err := os.WriteFile(bigInitrd, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bigInitrd, 64<<20); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		code int
		want string
		args []string
	}{
		{"missing kernel", 1, "no such file", []string{"run", "--kernel", "/nonexistent/vmlinux"}},
		{"directory as kernel", 1, "not a regular file", []string{"run", "--kernel", t.TempDir()}},
		{"text file", 1, "not a Linux kernel", []string{"run", "--kernel", text}},
		{"truncated ELF", 1, "truncated", []string{"run", "--kernel", truncated}},
		{"ELF for another architecture", 1, "aarch64", []string{"run", "--kernel", arm}},
		{"initrd larger than memory", 1, "initrd", []string{"run", "--kernel", vmlinux, "--initrd", bigInitrd, "--mem", "48M"}},
		{"missing initrd", 1, "no such file", []string{"run", "--kernel", vmlinux, "--initrd", "/nonexistent.cpio"}},
		{"mem not a size", 2, "not a size", []string{"run", "--kernel", vmlinux, "--mem", "lots"}},
		{"mem too small", 2, "--mem 1M is too small", []string{"run", "--kernel", vmlinux, "--mem", "1M"}},
		{"zero cpus", 2, "--cpus 0", []string{"run", "--kernel", vmlinux, "--cpus", "0"}},
		{"too many cpus", 2, "--cpus 100000: want 1 to 254", []string{"run", "--kernel", vmlinux, "--cpus", "100000", "--mem", "256M"}},
		{"unknown flag", 2, "unknown flag", []string{"run", "--frobnicate"}},
		{"missing disk", 1, "no such file", []string{"run", "--kernel", vmlinux, "--disk", "/nonexistent/disk.img"}},
		{"directory as disk", 1, "directory", []string{"run", "--kernel", vmlinux, "--disk", t.TempDir()}},
		{"disk in use", 1, "in use", []string{"run", "--kernel", vmlinux, "--disk", lockedDisk(t)}},
		{"vsock directory missing", 1, "does not exist", []string{"run", "--kernel", vmlinux, "--vsock", "/nonexistent/dir/v.sock"}},
		{"vsock path in use", 1, "in use", []string{"run", "--kernel", vmlinux, "--vsock", listeningSocket(t)}},
		{"cid without vsock", 2, "--cid needs --vsock", []string{"run", "--kernel", vmlinux, "--cid", "7"}},
		{"bad MAC", 1, "mac", []string{"run", "--kernel", vmlinux, "--net-tap", "smolbad0", "--mac", "zz:zz"}},
		{"multicast MAC", 1, "multicast", []string{"run", "--kernel", vmlinux, "--net-tap", "smolbad0", "--mac", "01:00:5e:00:00:01"}},
		{"mac without net-tap", 2, "--mac needs --net-tap", []string{"run", "--kernel", vmlinux, "--mac", "02:00:00:00:00:01"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expectOneLineError(t, c.code, c.want, c.args...) })
	}
}

func TestGuestRunningGarbageIsReportedWithRegisters(t *testing.T) {
	// ud2 at the entry point: #UD with no IDT is a triple fault.
	garbage := writeFile(t, "garbage-vmlinux", testkernel.ELF(testkernel.MachineX86_64, testkernel.Garbage))
	code, _, stderr := smolCLI(t, "run", "--kernel", garbage, "--cpus", "1", "--mem", "64M")
	if code == 0 || !strings.Contains(stderr, "triple") || !strings.Contains(stderr, "rip=") {
		t.Fatalf("exit %d, stderr %q; want a non-zero exit reporting a triple fault with registers", code, stderr)
	}
}

// lockedDisk returns a disk image that this process holds open read-write
// the way a running VM does.
func lockedDisk(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "busy.img")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := blk.Open(p, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return p
}

// listeningSocket returns a Unix socket path another program is serving.
func listeningSocket(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "busy.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return p
}

func TestTAPWithoutNetAdminIsAClearError(t *testing.T) {
	vmlinux := artifact(t, "build/vmlinux", "kernel")
	bin := artifact(t, "bin/smol", "build")
	// The same smol, without CAP_NET_ADMIN in its bounding set.
	cmd := exec.Command("setpriv", "--bounding-set=-net_admin", bin, "run", "--kernel", vmlinux, "--net-tap", "smolnocap0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(stderr.String(), "CAP_NET_ADMIN") {
		t.Fatalf("%v, stderr %q; want one line naming CAP_NET_ADMIN", err, stderr.String())
	}
}

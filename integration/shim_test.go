package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The containerd shim (cmd/containerd-shim-smol-v2) under Debian's
// containerd, started by the test with a private root, state and socket,
// driven with ctr as a user would.

// containerdRun is one containerd daemon of a test.
type containerdRun struct {
	t       *testing.T
	dir     string
	sock    string
	env     []string
	daemon  *exec.Cmd
	stopped chan struct{}
}

// startContainerd starts containerd with the shim on its PATH.
func startContainerd(t *testing.T) *containerdRun {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("containerd is not installed (scripts/install-deps.sh installs it)")
		}
		t.Skip("containerd is not installed (scripts/install-deps.sh)")
	}
	shimBin := artifact(t, "bin/containerd-shim-smol-v2", "build")
	dir := t.TempDir()
	c := &containerdRun{t: t, dir: dir, sock: filepath.Join(dir, "containerd.sock")}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock)
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600)
	c.env = append(os.Environ(), "PATH="+filepath.Dir(shimBin)+":"+os.Getenv("PATH"), "SMOL_SHIM_ROOT="+filepath.Join(dir, "shim"))
	c.start()
	t.Cleanup(c.cleanup)
	return c
}

func (c *containerdRun) start() {
	c.t.Helper()
	log, _ := os.OpenFile(filepath.Join(c.dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	c.daemon = exec.Command("containerd", "--config", filepath.Join(c.dir, "config.toml"))
	c.daemon.Env, c.daemon.Stdout, c.daemon.Stderr = c.env, log, log
	if err := c.daemon.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.stopped = make(chan struct{})
	go func() { c.daemon.Wait(); log.Close(); close(c.stopped) }()
	for i := 0; ; i++ {
		if conn, err := net.Dial("unix", c.sock); err == nil {
			conn.Close()
			return
		}
		if i == 300 {
			c.t.Fatalf("containerd did not listen within 30 s; its log:\n%s", c.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop kills containerd (its shims live on).
func (c *containerdRun) stop() {
	c.daemon.Process.Signal(syscall.SIGKILL)
	<-c.stopped
}

func (c *containerdRun) log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "containerd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (c *containerdRun) cleanup() {
	for _, id := range strings.Fields(c.ctrOut("tasks", "ls", "-q")) {
		c.ctr("tasks", "kill", "-s", "SIGKILL", id)
		time.Sleep(time.Second)
		c.ctr("tasks", "delete", "-f", id)
	}
	for _, id := range strings.Fields(c.ctrOut("containers", "ls", "-q")) {
		c.ctr("containers", "rm", id)
	}
	c.stop()
}

// ctr runs ctr against this containerd in namespace "smoltest".
func (c *containerdRun) ctr(args ...string) (int, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.sock, "-n", "smoltest"}, args...)...)
	cmd.Env = c.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		return -1, o.String(), err.Error()
	}
	return 0, o.String(), e.String()
}

func (c *containerdRun) ctrOut(args ...string) string {
	_, out, _ := c.ctr(args...)
	return out
}

func (c *containerdRun) mustCtr(args ...string) string {
	c.t.Helper()
	code, out, stderr := c.ctr(args...)
	if code != 0 {
		c.t.Fatalf("ctr %v: exit %d: %s\ncontainerd log:\n%s", args, code, stderr, c.log())
	}
	return out
}

const shimRuntime = "io.containerd.smol.v2"

// TestShimRunsContainers: ctr run through the shim prints the command's
// output and returns its status; a long-running task takes execs,
// survives a containerd restart, is killed and deleted; a command that
// does not exist is 127; nothing of the machines is left.
func TestShimRunsContainers(t *testing.T) {
	c := startContainerd(t)
	img := writeTarball(t, filepath.Join(t.TempDir(), "img.tar"), image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t)))
	c.mustCtr("images", "import", "--snapshotter", "native", img)
	ref := strings.Fields(c.mustCtr("images", "ls", "-q"))
	if len(ref) != 1 {
		t.Fatalf("imported images: %v", ref)
	}
	run := func(id string, args ...string) (int, string, string) {
		return c.ctr(append([]string{"run", "--rm", "--runtime", shimRuntime, "--snapshotter", "native", ref[0], id}, args...)...)
	}
	code, out, stderr := run("one", "sh", "-c", "echo hello from $(uname -s); cat /etc/hostname >/dev/null; exit 3")
	if code != 3 || out != "hello from Linux\n" {
		t.Fatalf("ctr run: exit %d, stdout %q, stderr %q\ncontainerd log:\n%s", code, out, stderr, c.log())
	}
	if code, _, stderr := run("missing", "no-such-command"); code == 0 {
		t.Errorf("a missing command: exit %d, %q", code, stderr)
	}
	// It ran in a smol machine: its kernel command line is smol's.
	if code, out, _ := run("where", "cat", "/proc/cmdline"); code != 0 || !strings.Contains(out, "smol.shares=") {
		t.Errorf("the container's kernel command line: %q (exit %d)", out, code)
	}

	c.mustCtr("run", "-d", "--runtime", shimRuntime, "--snapshotter", "native", ref[0], "long", "sh", "-c", "echo started > /tmp/mark; while :; do sleep 1; done")
	waitTask := func(want string) {
		t.Helper()
		for i := 0; i < 100; i++ {
			if strings.Contains(c.ctrOut("tasks", "ls"), want) {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
		t.Fatalf("task list never showed %q: %s", want, c.ctrOut("tasks", "ls"))
	}
	waitTask("RUNNING")
	if out := c.mustCtr("tasks", "exec", "--exec-id", "e1", "long", "sh", "-c", "cat /tmp/mark; echo exec-ok"); out != "started\nexec-ok\n" {
		t.Errorf("ctr task exec: %q", out)
	}
	c.stop()
	c.start()
	waitTask("RUNNING")
	if out := c.mustCtr("tasks", "exec", "--exec-id", "e2", "long", "echo", "after-restart"); out != "after-restart\n" {
		t.Errorf("exec after a containerd restart: %q", out)
	}
	c.mustCtr("tasks", "kill", "-s", "SIGKILL", "long")
	waitTask("STOPPED")
	c.mustCtr("tasks", "delete", "long")
	c.mustCtr("containers", "rm", "long")
	time.Sleep(2 * time.Second)
	if entries, _ := os.ReadDir(filepath.Join(c.dir, "shim", "home", "machines")); len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("machines left after every task was deleted: %v", names)
	}
}

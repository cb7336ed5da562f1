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

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The containerd shim (cmd/containerd-shim-smol-v2) under Debian's
// containerd, started by the test with a private root, state and socket,
// driven with ctr as a user would.

// containerdRun is one containerd daemon of a test.
type containerdRun struct {
	t       *testing.T
	dir     string
	ns      string // ctr's namespace
	sock    string
	env     []string
	daemon  *exec.Cmd
	stopped chan struct{}
}

// startContainerd starts containerd with the shim on its PATH; cri
// enables its CRI plugin with a "smol" runtime handler (ctr then works in
// the k8s.io namespace, where the CRI plugin looks for images).
func startContainerd(t *testing.T, cri bool) *containerdRun {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("containerd is not installed (scripts/install-deps.sh installs it)")
		}
		t.Skip("containerd is not installed (scripts/install-deps.sh)")
	}
	shimBin := artifact(t, "bin/containerd-shim-smol-v2", "build")
	dir := t.TempDir()
	c := &containerdRun{t: t, dir: dir, sock: filepath.Join(dir, "containerd.sock"), ns: "smoltest"}
	disabled := `["io.containerd.grpc.v1.cri"]`
	if cri {
		disabled = "[]"
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = %s
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), disabled, c.sock)
	if cri {
		c.ns = "k8s.io"
		os.MkdirAll(filepath.Join(dir, "cni", "conf"), 0o755)
		config += fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "smol"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.smol]
      runtime_type = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, pauseImage, shimRuntime, filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "conf"))
	}
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
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.sock, "-n", c.ns}, args...)...)
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
	c := startContainerd(t, false)
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

// pauseImage is the sandbox image the CRI plugin is given: busybox
// sleeping (a pod's sandbox container only holds the pod's place).
const pauseImage = "docker.io/test/pause:1"

// TestShimCRI acts as kubelet: a pod with runtime handler smol, two
// containers in it that share its VM (one serves on localhost, the other
// reaches it), ExecSync, a container's exit code, then the pod stopped
// and removed.
func TestShimCRI(t *testing.T) {
	c := startContainerd(t, true)
	dir := t.TempDir()
	app := writeTarball(t, filepath.Join(dir, "app.tar"), image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t)))
	c.mustCtr("images", "import", "--snapshotter", "native", app)
	pauseTar := filepath.Join(dir, "pause.tar")
	writeNamedTarball(t, pauseTar, pauseImage, image(t, v1.Config{Env: []string{"PATH=/bin"}, Entrypoint: []string{"/bin/sleep", "100000"}}, busyboxLayer(t)))
	c.mustCtr("images", "import", "--snapshotter", "native", pauseTar)
	appRef := "docker.io/test/pack:1"

	conn, err := grpc.Dial("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	podCfg := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: "pod", Uid: "uid-1", Namespace: "default"},
		LogDirectory: filepath.Join(dir, "logs"),
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}}},
	}
	sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "smol"})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\ncontainerd log:\n%s", err, c.log())
	}
	start := func(name string, cmd ...string) string {
		t.Helper()
		cr, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: podCfg,
			Config: &cri.ContainerConfig{Metadata: &cri.ContainerMetadata{Name: name}, Image: &cri.ImageSpec{Image: appRef},
				Command: cmd, LogPath: name + ".log"}})
		if err != nil {
			t.Fatalf("CreateContainer %s: %v\ncontainerd log:\n%s", name, err, c.log())
		}
		if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
			t.Fatalf("StartContainer %s: %v\ncontainerd log:\n%s", name, err, c.log())
		}
		return cr.ContainerId
	}
	server := start("server", "sh", "-c", "while :; do echo pong | busybox nc -l -p 9000; done")
	client := start("client", "sleep", "100000")
	var got string
	for i := 0; i < 20 && got != "pong\n"; i++ { // the server may not listen yet
		res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: []string{"sh", "-c", "echo ping | busybox nc -w 3 127.0.0.1 9000"}, Timeout: 30})
		if err != nil {
			t.Fatalf("ExecSync: %v", err)
		}
		got = string(res.Stdout)
		time.Sleep(500 * time.Millisecond)
	}
	if got != "pong\n" {
		t.Errorf("the client container reached the server over localhost as %q", got)
	}
	res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: server, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 5"}, Timeout: 30})
	if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 5 {
		t.Errorf("ExecSync: %+v, %v", res, err)
	}
	quitter := start("quitter", "sh", "-c", "exit 7")
	for i := 0; ; i++ {
		st, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: quitter})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.State == cri.ContainerState_CONTAINER_EXITED {
			if st.Status.ExitCode != 7 {
				t.Errorf("the container's exit code %d, want 7", st.Status.ExitCode)
			}
			break
		}
		if i == 100 {
			t.Fatalf("the container never exited: %v", st.Status.State)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	time.Sleep(2 * time.Second)
	if entries, _ := os.ReadDir(filepath.Join(c.dir, "shim", "home", "machines")); len(entries) > 0 {
		t.Errorf("the pod's machine is left after RemovePodSandbox: %d machines", len(entries))
	}
}

// writeNamedTarball writes img as a docker-save tarball tagged ref.
func writeNamedTarball(t *testing.T, path, ref string, img v1.Image) {
	t.Helper()
	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
}

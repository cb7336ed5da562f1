package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol/internal/containerdtest"
	"github.com/smolvm/smol/internal/imagetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The containerd shim (cmd/containerd-shim-smol-v2) under Debian's
// containerd, started by the test with a private root, state and socket,
// driven with ctr as a user would.

// containerdRun is one containerd daemon of a test.
type containerdRun struct {
	*containerdtest.Daemon
	t *testing.T
}

// startContainerd starts a private containerd with the shim on its PATH
// (with cri, its CRI plugin with the runtime handler "smol").
func startContainerd(t *testing.T, cri bool) *containerdRun {
	t.Helper()
	shimBin := artifact(t, "bin/containerd-shim-smol-v2", "build")
	d, err := containerdtest.Start(t.TempDir(), shimBin, cri)
	if errors.Is(err, containerdtest.ErrNoContainerd) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return &containerdRun{Daemon: d, t: t}
}

func (c *containerdRun) mustCtr(args ...string) string {
	c.t.Helper()
	code, out, stderr := c.Ctr(args...)
	if code != 0 {
		c.fatalf("ctr %v: exit %d: %s\ncontainerd log:\n%s\nmachines:\n%s", args, code, stderr, c.Log(), c.Machines())
	}
	return out
}

const shimRuntime = containerdtest.Runtime

// shimTest runs body against a fresh containerd, and again, up to
// guestAttempts times, when one of the shim's guests died under it. Known
// issue, open (README): smol's guests triple-fault now and then in the
// nested box, silently, with reset-state registers. Only that death is
// retried — the shim logs it with the machine's failure, which names the
// triple fault — and each retry is logged; any other failure fails the
// test at once.
func shimTest(t *testing.T, cri bool, body func(c *containerdRun)) {
	t.Helper()
	for i := 1; ; i++ {
		c := startContainerd(t, cri)
		died := c.attempt(body)
		if died == nil {
			return
		}
		c.Close()
		if i == guestAttempts {
			t.Fatalf("a pod's guest died in all %d attempts; last: %s", guestAttempts, died.msg)
		}
		t.Logf("KNOWN ISSUE: a pod's guest died (%.600s); attempt %d of %d", died.msg, i+1, guestAttempts)
	}
}

// attempt runs body and reports the guest death that ended it, if one did.
func (c *containerdRun) attempt(body func(c *containerdRun)) (died *guestDied) {
	defer func() {
		if r := recover(); r != nil {
			d, ok := r.(*guestDied)
			if !ok {
				panic(r)
			}
			died = d
		}
	}()
	body(c)
	return nil
}

// fatalf fails the test, unless a guest died under it (then the attempt
// ends, for shimTest to run again).
func (c *containerdRun) fatalf(format string, args ...any) {
	c.t.Helper()
	c.endIfGuestDied(format, args...)
	c.t.Fatalf(format, args...)
}

func (c *containerdRun) fatal(args ...any) {
	c.t.Helper()
	c.endIfGuestDied("%s", fmt.Sprint(args...))
	c.t.Fatal(args...)
}

// errorf is t.Errorf, unless a guest died under the test (see fatalf).
func (c *containerdRun) errorf(format string, args ...any) {
	c.t.Helper()
	c.endIfGuestDied(format, args...)
	c.t.Errorf(format, args...)
}

// endIfGuestDied ends the attempt when the shim has logged a machine that
// failed by the box's known silent triple fault (reset-state registers)
// or whose guest hung before its agent started. The shim's lines reach
// containerd's log a moment after the failure they explain reached the
// test, so it looks twice.
func (c *containerdRun) endIfGuestDied(format string, args ...any) {
	for try := 0; try < 2; try++ {
		for _, line := range strings.Split(c.FullLog(), "\n") {
			if silentTripleFaultReport(line) || bootHangReport(line) {
				panic(&guestDied{msg: line + "; the test saw: " + fmt.Sprintf(format, args...)})
			}
		}
		time.Sleep(time.Second)
	}
}

// TestShimRunsContainers: ctr run through the shim prints the command's
// output and returns its status; a long-running task takes execs,
// survives a containerd restart, is killed and deleted; a command that
// does not exist is 127; nothing of the machines is left.
func TestShimRunsContainers(t *testing.T) {
	shimTest(t, false, func(c *containerdRun) {
		img := writeTarball(t, filepath.Join(t.TempDir(), "img.tar"), image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t)))
		c.mustCtr("images", "import", "--snapshotter", "native", img)
		ref := strings.Fields(c.mustCtr("images", "ls", "-q"))
		if len(ref) != 1 {
			c.fatalf("imported images: %v", ref)
		}
		run := func(id string, args ...string) (int, string, string) {
			return c.Ctr(append([]string{"run", "--rm", "--runtime", shimRuntime, "--snapshotter", "native", ref[0], id}, args...)...)
		}
		code, out, stderr := run("one", "sh", "-c", "echo hello from $(uname -s); cat /etc/hostname >/dev/null; exit 3")
		if code != 3 || out != "hello from Linux\n" {
			c.fatalf("ctr run: exit %d, stdout %q, stderr %q\ncontainerd log:\n%s", code, out, stderr, c.Log())
		}
		// It exits 127, and why is on its stderr.
		if code, _, stderr := run("missing", "no-such-command"); code != 127 || !strings.Contains(stderr, "no-such-command") {
			c.errorf("a missing command: exit %d, %q", code, stderr)
		} else {
			t.Logf("a missing command: exit %d, %q", code, stderr)
		}
		// A container whose Create fails (a CPU quota below the least
		// the guest's cgroups take) is refused, though its machine began
		// to boot in containerd's `shim start`: the shim's shutdown
		// removes it (no machine is left: checked at the end).
		if code, _, stderr := c.Ctr("run", "--rm", "--runtime", shimRuntime, "--snapshotter", "native", "--cpu-quota", "500", "--cpu-period", "100000", ref[0], "badquota", "true"); code == 0 || !strings.Contains(stderr, "CPU quota") {
			c.errorf("a container with a 500 µs CPU quota: exit %d, %q", code, stderr)
		}
		// It ran in a smol machine: its kernel command line is smol's.
		if code, out, stderr := run("where", "cat", "/proc/cmdline"); code != 0 || !strings.Contains(out, "smol.shares=") {
			c.errorf("the container's kernel command line: %q (exit %d, stderr %q)", out, code, stderr)
		}

		c.mustCtr("run", "-d", "--runtime", shimRuntime, "--snapshotter", "native", ref[0], "long", "sh", "-c", "echo started > /tmp/mark; while :; do sleep 1; done")
		waitTask := func(want string) {
			t.Helper()
			for i := 0; i < 100; i++ {
				if strings.Contains(c.CtrOut("tasks", "ls"), want) {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
			c.fatalf("task list never showed %q: %s", want, c.CtrOut("tasks", "ls"))
		}
		waitTask("RUNNING")
		if out := c.mustCtr("tasks", "exec", "--exec-id", "e1", "long", "sh", "-c", "cat /tmp/mark; echo exec-ok"); out != "started\nexec-ok\n" {
			c.errorf("ctr task exec: %q", out)
		}
		if err := c.Restart(); err != nil {
			c.fatal(err)
		}
		waitTask("RUNNING")
		if out := c.mustCtr("tasks", "exec", "--exec-id", "e2", "long", "echo", "after-restart"); out != "after-restart\n" {
			c.errorf("exec after a containerd restart: %q", out)
		}
		c.mustCtr("tasks", "kill", "-s", "SIGKILL", "long")
		waitTask("STOPPED")
		c.mustCtr("tasks", "delete", "long")
		c.mustCtr("containers", "rm", "long")
		time.Sleep(2 * time.Second)
		if entries, _ := os.ReadDir(filepath.Join(c.ShimRoot(), "home", "machines")); len(entries) > 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			c.errorf("machines left after every task was deleted: %v\ncontainerd log:\n%s", names, c.Log())
		}
	})
}

const pauseImage = containerdtest.PauseImage

// TestShimCRI acts as kubelet: a pod with runtime handler smol, two
// containers in it that share its VM (one serves on localhost, the other
// reaches it), ExecSync, a container's exit code, then the pod stopped
// and removed. A container with a read-only root, a supplementary group
// and only CAP_NET_RAW has all three.
func TestShimCRI(t *testing.T) {
	shimTest(t, true, func(c *containerdRun) {
		dir := t.TempDir()
		// The app image is hostile: its /etc/resolv.conf and /etc/hosts,
		// where the pod's files are mounted, point at a file of the host.
		victim := filepath.Join(dir, "victim")
		if err := os.WriteFile(victim, []byte("the host's own\n"), 0o644); err != nil {
			c.fatal(err)
		}
		hostile := layer(t, imagetest.Symlink("etc/resolv.conf", victim), imagetest.Symlink("etc/hosts", "../../../../.."+victim))
		app := writeTarball(t, filepath.Join(dir, "app.tar"), image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t), hostile))
		c.mustCtr("images", "import", "--snapshotter", "native", app)
		pauseTar := filepath.Join(dir, "pause.tar")
		writeNamedTarball(t, pauseTar, pauseImage, image(t, v1.Config{Env: []string{"PATH=/bin"}, Entrypoint: []string{"/bin/sleep", "100000"}}, busyboxLayer(t)))
		c.mustCtr("images", "import", "--snapshotter", "native", pauseTar)
		appRef := "docker.io/test/pack:1"

		conn, err := grpc.Dial("unix://"+c.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.fatal(err)
		}
		defer conn.Close()
		rt := cri.NewRuntimeServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		podCfg := &cri.PodSandboxConfig{
			Metadata:     &cri.PodSandboxMetadata{Name: "pod", Uid: "uid-1", Namespace: "default"},
			Hostname:     "pod-host",
			DnsConfig:    &cri.DNSConfig{Servers: []string{"10.0.0.53"}, Searches: []string{"example.test"}},
			LogDirectory: filepath.Join(dir, "logs"),
			Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
				NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}}},
		}
		sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "smol"})
		if err != nil {
			c.fatalf("RunPodSandbox: %v\ncontainerd log:\n%s", err, c.Log())
		}
		startLinux := func(linux *cri.LinuxContainerConfig, mounts []*cri.Mount, name string, cmd ...string) string {
			t.Helper()
			cr, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: podCfg,
				Config: &cri.ContainerConfig{Metadata: &cri.ContainerMetadata{Name: name}, Image: &cri.ImageSpec{Image: appRef},
					Command: cmd, LogPath: name + ".log", Linux: linux, Mounts: mounts}})
			if err != nil {
				c.fatalf("CreateContainer %s: %v\ncontainerd log:\n%s", name, err, c.Log())
			}
			if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
				c.fatalf("StartContainer %s: %v\ncontainerd log:\n%s", name, err, c.Log())
			}
			return cr.ContainerId
		}
		startWith := func(sc *cri.LinuxContainerSecurityContext, mounts []*cri.Mount, name string, cmd ...string) string {
			t.Helper()
			return startLinux(&cri.LinuxContainerConfig{SecurityContext: sc}, mounts, name, cmd...)
		}
		start := func(name string, cmd ...string) string {
			t.Helper()
			return startWith(nil, nil, name, cmd...)
		}
		server := start("server", "sh", "-c", "while :; do echo pong | busybox nc -l -p 9000; done")
		client := start("client", "sleep", "100000")
		var got string
		for i := 0; i < 20 && got != "pong\n"; i++ { // the server may not listen yet
			res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: []string{"sh", "-c", "echo ping | busybox nc -w 3 127.0.0.1 9000"}, Timeout: 30})
			if err != nil {
				st, _ := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: client})
				log, _ := os.ReadFile(filepath.Join(dir, "logs", "client.log"))
				c.fatalf("ExecSync: %v; the client container: %+v, its log %q\ncontainerd log:\n%s", err, st.GetStatus(), log, c.Log())
			}
			got = string(res.Stdout)
			time.Sleep(500 * time.Millisecond)
		}
		if got != "pong\n" {
			c.errorf("the client container reached the server over localhost as %q", got)
		}
		// PID namespaces, as CRI asks: this pod's containers share the
		// pod's (NamespaceMode_POD, CRI's default), whose PID 1 is the
		// sandbox's pause; a container asking for its own
		// (NamespaceMode_CONTAINER, kubelet's default) is PID 1 of it and
		// sees none of the pod's other processes.
		pidProbe := []string{"sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; echo self $$; " +
			"cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c -e '-p 900[0]'"}
		if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: pidProbe, Timeout: 30}); err != nil ||
			!strings.HasPrefix(string(res.Stdout), "/bin/sleep 100000 \n") || strings.Contains(string(res.Stdout), "self 1\n") ||
			strings.HasSuffix(string(res.Stdout), "\n0\n") {
			c.errorf("a container sharing the pod's PID namespace (want PID 1 the pause, the server's nc seen): %+v, %v", res, err)
		}
		// Kubelet's masked and read-only paths (CRI passes them; containerd
		// has no defaults of its own).
		masked, readOnly := []string{"/proc/keys", "/proc/kcore", "/sys/firmware"}, []string{"/proc/sys", "/proc/sysrq-trigger"}
		ownPIDs := startWith(&cri.LinuxContainerSecurityContext{NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, Pid: cri.NamespaceMode_CONTAINER},
			MaskedPaths: masked, ReadonlyPaths: readOnly}, nil, "own-pids", "sleep", "200000")
		if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: ownPIDs, Cmd: pidProbe, Timeout: 30}); err != nil ||
			!strings.HasPrefix(string(res.Stdout), "sleep 200000 \n") || strings.Contains(string(res.Stdout), "self 1\n") ||
			!strings.HasSuffix(string(res.Stdout), "\n0\n") {
			c.errorf("a container with a PID namespace of its own (want PID 1 its sleep, no nc of the server): %+v, %v", res, err)
		}
		// The masked and read-only paths hold in the /proc of a container's
		// own PID namespace (and in one joining the pod's, below); a
		// container without them has none.
		maskProbe := []string{"sh", "-c", "cat /proc/sys/kernel/ostype; echo 1 > /proc/sysrq-trigger || echo sysrq-refused; " +
			"wc -c < /proc/keys; ls /sys/firmware | wc -l; grep -c -e ' /proc/keys ' -e ' /proc/sys proc ro,' /proc/mounts"}
		maskedIn := func(id string) string {
			t.Helper()
			res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: id, Cmd: maskProbe, Timeout: 30})
			if err != nil {
				c.fatalf("ExecSync: %v\ncontainerd log:\n%s\n%s", err, c.Log(), c.Machines())
			}
			return strings.Join(strings.Fields(string(res.Stdout)), " ")
		}
		if got := maskedIn(ownPIDs); got != "Linux sysrq-refused 0 0 2" {
			c.errorf("masked and read-only paths in a container's own /proc: %q, want the kernel's name read, sysrq refused, /proc/keys and /sys/firmware empty, both mounts", got)
		}
		if got := maskedIn(client); !strings.HasSuffix(got, " 0") {
			c.errorf("a container without masked paths has them: %q", got)
		}
		// Stats are each container's own (its guest cgroup): CPU burnt by an
		// exec in one (a shell loop) shows there and not in its idle
		// neighbour's.
		cpuOf := func() (busy, idle uint64) {
			t.Helper()
			var ns [2]uint64
			for i, id := range []string{client, ownPIDs} {
				st, err := rt.ContainerStats(ctx, &cri.ContainerStatsRequest{ContainerId: id})
				if err != nil {
					c.fatalf("ContainerStats: %v\ncontainerd log:\n%s", err, c.Log())
				}
				if st.Stats.GetMemory().GetUsageBytes().GetValue() == 0 || st.Stats.GetMemory().GetWorkingSetBytes().GetValue() == 0 {
					c.errorf("container stats: no memory in use: %+v", st.Stats.GetMemory())
				}
				ns[i] = st.Stats.GetCpu().GetUsageCoreNanoSeconds().GetValue()
			}
			return ns[0], ns[1]
		}
		busy0, idle0 := cpuOf()
		if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: []string{"sh", "-c", "i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done"}, Timeout: 120}); err != nil || res.ExitCode != 0 {
			c.fatalf("ExecSync of a busy loop: %+v, %v", res, err)
		}
		busy1, idle1 := cpuOf()
		t.Logf("container stats: CPU over a busy loop in one container: %v there, %v in its idle neighbour", time.Duration(busy1-busy0), time.Duration(idle1-idle0))
		if busy1 <= busy0 || busy1-busy0 <= idle1-idle0 {
			c.errorf("container stats: the container that ran the loop used %v CPU (%d to %d ns), its idle neighbour %v", time.Duration(busy1-busy0), busy0, busy1, time.Duration(idle1-idle0))
		}
		res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: server, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 5"}, Timeout: 30})
		if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 5 {
			c.errorf("ExecSync: %+v, %v", res, err)
		}
		// The security context's read-only root, supplementary groups and
		// capabilities hold in the guest; the other containers' roots stay
		// writable, with containerd's default capabilities (not all). The
		// read-only container's volumes: one writable, one read-only.
		volume, roVolume := filepath.Join(dir, "volume"), filepath.Join(dir, "ro-volume")
		for _, d := range []string{volume, roVolume} {
			if err := os.Mkdir(d, 0o755); err != nil {
				c.fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(roVolume, "seed"), []byte("seeded\n"), 0o644); err != nil {
			c.fatal(err)
		}
		locked := startWith(&cri.LinuxContainerSecurityContext{ReadonlyRootfs: true, SupplementalGroups: []int64{1234}, NoNewPrivs: true,
			Capabilities: &cri.Capability{DropCapabilities: []string{"ALL"}, AddCapabilities: []string{"NET_RAW"}},
			MaskedPaths:  masked, ReadonlyPaths: readOnly},
			[]*cri.Mount{{ContainerPath: "/data", HostPath: volume}, {ContainerPath: "/ro", HostPath: roVolume, Readonly: true},
				{ContainerPath: "/dev/shm/data", HostPath: volume}},
			"locked", "sleep", "100000")
		probe := []string{"sh", "-c", "id -G; grep -E 'CapBnd|NoNewPrivs' /proc/self/status; touch /written 2>/dev/null && echo writable || echo read-only"}
		if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: locked, Cmd: probe, Timeout: 30}); err != nil ||
			!strings.Contains(string(res.Stdout), "1234") || !strings.Contains(string(res.Stdout), "CapBnd:\t0000000000002000\n") ||
			!strings.Contains(string(res.Stdout), "NoNewPrivs:\t1\n") || !strings.HasSuffix(string(res.Stdout), "read-only\n") {
			c.errorf("a read-only container with group 1234, only CAP_NET_RAW and no new privileges: %+v, %v\ncontainerd log:\n%s\n%s", res, err, c.Log(), c.Machines())
		}
		if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: probe, Timeout: 30}); err != nil ||
			strings.Contains(string(res.Stdout), "1234") || !strings.Contains(string(res.Stdout), "CapBnd:\t00000000") ||
			!strings.Contains(string(res.Stdout), "NoNewPrivs:\t0\n") || !strings.HasSuffix(string(res.Stdout), "writable\n") {
			c.errorf("a plain container: %+v, %v\ncontainerd log:\n%s\n%s", res, err, c.Log(), c.Machines())
		}
		// The pod's DNS configuration and host name reach every container
		// (CRI's /etc/resolv.conf, /etc/hostname and /etc/hosts mounts, made
		// inside the container's root although the image's symlinks point
		// out of it), and the volumes work as asked.
		volProbe := []string{"sh", "-c", "cat /etc/resolv.conf /etc/hostname; test -s /etc/hosts && echo hosts; " +
			"echo v > /data/from-guest && echo data-writable; (echo x > /ro/f) 2>/dev/null || echo ro-refused; cat /ro/seed; " +
			"cat /dev/shm/data/from-guest; echo > /dev/null && echo null-ok; touch /dev/mine && echo own-dev"}
		res, err = rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: locked, Cmd: volProbe, Timeout: 30})
		if err != nil {
			c.fatalf("ExecSync: %v", err)
		}
		for _, want := range []string{"nameserver 10.0.0.53\n", "search example.test\n", "pod-host\n", "hosts\n", "data-writable\n", "ro-refused\n", "seeded\n", "v\n", "null-ok\n", "own-dev\n"} {
			if !strings.Contains(string(res.Stdout), want) {
				c.errorf("the read-only container with volumes lacks %q: %q %q (exit %d)", want, res.Stdout, res.Stderr, res.ExitCode)
			}
		}
		if got := maskedIn(locked); got != "Linux sysrq-refused 0 0 2" {
			c.errorf("masked and read-only paths in a read-only container in the pod's PID namespace: %q", got)
		}
		if b, err := os.ReadFile(filepath.Join(volume, "from-guest")); err != nil || string(b) != "v\n" {
			c.errorf("the guest's write to its volume, on the host: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(roVolume, "f")); !os.IsNotExist(err) {
			c.errorf("the read-only volume took a write: %v", err)
		}
		// Each container's /dev is its own; /dev/shm is the pod's.
		if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: []string{"sh", "-c",
			"cat /etc/resolv.conf; test -e /dev/mine || echo private-dev; test -d /dev/shm/data && echo shared-shm"}, Timeout: 30}); err != nil ||
			!strings.Contains(string(res.Stdout), "nameserver 10.0.0.53\n") || !strings.Contains(string(res.Stdout), "private-dev\n") ||
			!strings.Contains(string(res.Stdout), "shared-shm\n") {
			c.errorf("a plain container's /etc/resolv.conf and /dev: %+v, %v", res, err)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "the host's own\n" {
			c.errorf("the host file the image's symlinks named: %q, %v", b, err)
		}
		// A container's resources are its cgroup's limits: a 20 MiB buffer
		// is more than a 16 MiB limit allows (the OOM killer ends it, and
		// CRI says OOMKilled), and fits a container without one. A CPU quota
		// set by UpdateContainerResources holds a busy loop to it.
		ended := func(id string) *cri.ContainerStatus {
			t.Helper()
			for i := 0; ; i++ {
				st, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id})
				if err != nil {
					c.fatal(err)
				}
				if st.Status.State == cri.ContainerState_CONTAINER_EXITED {
					return st.Status
				}
				if i == 100 {
					c.fatalf("the container never exited: %v", st.Status.State)
				}
				time.Sleep(300 * time.Millisecond)
			}
		}
		hog := []string{"busybox", "dd", "if=/dev/zero", "of=/dev/null", "bs=20M", "count=1"}
		limited := startLinux(&cri.LinuxContainerConfig{Resources: &cri.LinuxContainerResources{MemoryLimitInBytes: 16 << 20}}, nil, "limited", hog...)
		unlimited := start("unlimited", hog...)
		if st := ended(limited); st.ExitCode != 137 || st.Reason != "OOMKilled" {
			c.errorf("a 20 MiB buffer under a 16 MiB limit: exit %d, reason %q (want 137, OOMKilled)", st.ExitCode, st.Reason)
		}
		if st := ended(unlimited); st.ExitCode != 0 || st.Reason == "OOMKilled" {
			c.errorf("a 20 MiB buffer without a limit: exit %d, reason %q", st.ExitCode, st.Reason)
		}
		spin := func() (cpu, wall time.Duration) {
			t.Helper()
			before, _ := cpuOf()
			began := time.Now()
			if res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: client, Cmd: []string{"busybox", "timeout", "-s", "KILL", "4", "sh", "-c", "while :; do :; done"}, Timeout: 60}); err != nil || res.ExitCode != 137 {
				c.fatalf("ExecSync of a 4 s busy loop: %+v, %v", res, err)
			}
			wall = time.Since(began)
			after, _ := cpuOf()
			return time.Duration(after - before), wall
		}
		freeCPU, freeWall := spin()
		if _, err := rt.UpdateContainerResources(ctx, &cri.UpdateContainerResourcesRequest{ContainerId: client,
			Linux: &cri.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 10000}}); err != nil {
			c.fatalf("UpdateContainerResources: %v\ncontainerd log:\n%s", err, c.Log())
		}
		heldCPU, heldWall := spin()
		t.Logf("a 4 s busy loop: %v CPU in %v without a quota, %v in %v with 10 ms per 100 ms", freeCPU, freeWall, heldCPU, heldWall)
		if freeCPU < freeWall/4 || heldCPU > heldWall/4 || freeCPU < 2*heldCPU {
			c.errorf("a CPU quota of 10%%: the loop used %v CPU in %v (without it %v in %v)", heldCPU, heldWall, freeCPU, freeWall)
		}
		quitter := start("quitter", "sh", "-c", "exit 7")
		if st := ended(quitter); st.ExitCode != 7 {
			c.errorf("the container's exit code %d, want 7", st.ExitCode)
		}
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			c.fatalf("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			c.fatalf("RemovePodSandbox: %v", err)
		}
		time.Sleep(2 * time.Second)
		if entries, _ := os.ReadDir(filepath.Join(c.ShimRoot(), "home", "machines")); len(entries) > 0 {
			c.errorf("the pod's machine is left after RemovePodSandbox: %d machines", len(entries))
		}
	})
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

// Package containerdtest runs a private containerd daemon (its own root,
// state and socket) with smol's shim on its PATH, for the shim's tests and
// benchmarks, and drives it with ctr.
package containerdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/smolvm/smol/internal/mountinfo"
)

// Runtime is the shim's runtime name.
const Runtime = "io.containerd.smol.v2"

// PauseImage is the sandbox image a CRI daemon is given (the caller
// imports an image of that name: busybox sleeping will do, since a pod's
// sandbox container only holds the pod's place).
const PauseImage = "docker.io/test/pause:1"

// ErrNoContainerd: containerd is not installed.
var ErrNoContainerd = errors.New("containerd is not installed (scripts/install-deps.sh installs it)")

// Daemon is one running containerd.
type Daemon struct {
	Dir  string // its private directory
	Sock string // its gRPC socket
	NS   string // the namespace ctr works in
	env  []string

	cmd     *exec.Cmd
	stopped chan struct{}
	closed  bool
}

// Start runs containerd in dir with the shim binary shim on its PATH and
// the shim's state under dir/shim. With cri, its CRI plugin is on with the
// runtime handler "smol" as the default (ctr then works in the k8s.io
// namespace, where the CRI plugin looks for images); the snapshotter is
// native either way (no overlayfs needed).
func Start(dir, shim string, cri bool) (*Daemon, error) {
	return StartWith(dir, shim, Options{CRI: cri})
}

// Options are what a daemon offers beyond the shim.
type Options struct {
	CRI bool // the CRI plugin, with the runtime handler "smol" as default
	// Runc adds the runtime handler "runc" (Debian's runc, through
	// containerd's runc shim), for comparisons on the same daemon.
	Runc bool
	// CNIBin, if set, is the directory of the CNI plugins, and pods get a
	// network of their own: a bridge with addresses from 10.88.0.0/16
	// (state under dir/cni) and loopback.
	CNIBin string
	// PlainHTTP lists registry hosts (host:port) pulled over plain HTTP.
	PlainHTTP []string
}

// StartWith is Start with the options o.
func StartWith(dir, shim string, o Options) (*Daemon, error) {
	if _, err := exec.LookPath("containerd"); err != nil {
		return nil, ErrNoContainerd
	}
	d := &Daemon{Dir: dir, Sock: filepath.Join(dir, "containerd.sock"), NS: "smoltest"}
	disabled := `["io.containerd.grpc.v1.cri"]`
	if o.CRI {
		disabled, d.NS = "[]", "k8s.io"
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = %s
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), disabled, d.Sock)
	if o.CRI {
		cniBin, cniConf := filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "conf")
		os.MkdirAll(cniConf, 0o755)
		if o.CNIBin != "" {
			cniBin = o.CNIBin
			if err := os.WriteFile(filepath.Join(cniConf, "10-smoltest.conflist"), []byte(bridgeNetwork(filepath.Join(dir, "cni", "ipam"))), 0o644); err != nil {
				return nil, err
			}
		}
		config += fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "smol"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.smol]
      runtime_type = %q
`, PauseImage, Runtime)
		if o.Runc {
			config += `    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`
		}
		config += fmt.Sprintf(`  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, cniBin, cniConf)
		for _, host := range o.PlainHTTP {
			config += fmt.Sprintf(`  [plugins."io.containerd.grpc.v1.cri".registry.mirrors.%q]
    endpoint = [%q]
`, host, "http://"+host)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	d.env = append(os.Environ(), "PATH="+filepath.Dir(shim)+":"+os.Getenv("PATH"), "SMOL_SHIM_ROOT="+d.ShimRoot())
	return d, d.start()
}

// bridgeNetwork is a CNI network list: a bridge with host-local addresses
// kept in ipamDir, and loopback.
func bridgeNetwork(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "smoltest",
  "plugins": [
    {"type": "bridge", "bridge": "smoltest0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`, ipamDir)
}

// ShimRoot is where the shim keeps its machines and container roots.
func (d *Daemon) ShimRoot() string { return filepath.Join(d.Dir, "shim") }

func (d *Daemon) start() error {
	log, err := os.OpenFile(filepath.Join(d.Dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	d.cmd = exec.Command("containerd", "--config", filepath.Join(d.Dir, "config.toml"))
	d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = d.env, log, log
	if err := d.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	d.stopped = make(chan struct{})
	go func() { d.cmd.Wait(); log.Close(); close(d.stopped) }()
	for i := 0; ; i++ {
		if conn, err := net.Dial("unix", d.Sock); err == nil {
			conn.Close()
			return nil
		}
		if i == 300 {
			return fmt.Errorf("containerd did not listen within 30 s; its log ends:\n%s", d.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Restart kills containerd and starts it again (its shims live on).
func (d *Daemon) Restart() error {
	d.Kill()
	return d.start()
}

// Kill ends containerd at once.
func (d *Daemon) Kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.stopped
}

// Log is the end of containerd's log.
func (d *Daemon) Log() string {
	b := []byte(d.FullLog())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// FullLog is containerd's log, its shims' lines included.
func (d *Daemon) FullLog() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "containerd.log"))
	return string(b)
}

// Machines describes the shim's machines as they are now, for a test
// whose pod died: the end of each one's guest console and VMM log, and
// the end of the kernel's log (an OOM kill or a crash of the shim or the
// VMM shows there).
func (d *Daemon) Machines() string {
	var b strings.Builder
	tail := func(path string, n int) string {
		data, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		if len(data) > n {
			data = data[len(data)-n:]
		}
		return string(data)
	}
	dir := filepath.Join(d.ShimRoot(), "home", "machines")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		for _, f := range []string{"console.log", "vmm.log"} {
			fmt.Fprintf(&b, "--- machine %s, %s:\n%s\n", e.Name(), f, tail(filepath.Join(dir, e.Name(), f), 3000))
		}
	}
	kernel, _ := exec.Command("dmesg").CombinedOutput()
	if len(kernel) > 3000 {
		kernel = kernel[len(kernel)-3000:]
	}
	fmt.Fprintf(&b, "--- kernel log:\n%s", kernel)
	return b.String()
}

// Close removes every task and container, then ends containerd. Once is
// enough: later calls do nothing.
func (d *Daemon) Close() {
	if d.closed {
		return
	}
	d.closed = true
	for _, id := range strings.Fields(d.CtrOut("tasks", "ls", "-q")) {
		d.Ctr("tasks", "kill", "-s", "SIGKILL", id)
		time.Sleep(time.Second)
		d.Ctr("tasks", "delete", "-f", id)
	}
	for _, id := range strings.Fields(d.CtrOut("containers", "ls", "-q")) {
		d.Ctr("containers", "rm", id)
	}
	d.Kill()
	// A test that failed before it removed its pod leaves the CRI
	// plugin's sandbox /dev/shm mounted under the directory.
	mountinfo.DetachAllUnder(d.Dir)
}

// Ctr runs ctr against the daemon, in its namespace.
func (d *Daemon) Ctr(args ...string) (code int, stdout, stderr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", d.Sock, "-n", d.NS}, args...)...)
	cmd.Env = d.env
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

// CtrOut is Ctr's stdout.
func (d *Daemon) CtrOut(args ...string) string {
	_, out, _ := d.Ctr(args...)
	return out
}

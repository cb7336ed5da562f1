// Command shim measures a pod start through containerd's CRI plugin and
// smol's shim (RunPodSandbox, CreateContainer and StartContainer of one
// container, to StartContainer's answer) against `smol run -- true` in
// the same session, alternating, and prints the ratio (target ≤ 1.3).
// containerd is Debian's, started privately (internal/containerdtest).
//
// Run it where /dev/kvm boots Linux; on this project's machines that is
// the test box: make bench-shim.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/smolvm/smol/bench/internal/benchimage"
	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/bench/internal/stats"
	"github.com/smolvm/smol/internal/containerdtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	n := flag.Int("n", 5, "rounds")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	shimBin := flag.String("shim", "bin/containerd-shim-smol-v2", "the shim")
	flag.Parse()
	work, err := os.MkdirTemp("", "smol-bench-shim-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	shim, _ := filepath.Abs(*shimBin)
	d, err := containerdtest.Start(work, shim, true)
	if err != nil {
		fatal(err)
	}
	defer d.Close()
	app, pause := filepath.Join(work, "app.tar"), filepath.Join(work, "pause.tar")
	if err := benchimage.BusyboxAs(app, "docker.io/bench/busybox:1", nil); err != nil {
		fatal(err)
	}
	if err := benchimage.BusyboxAs(pause, containerdtest.PauseImage, []string{"/bin/sleep", "100000"}); err != nil {
		fatal(err)
	}
	for _, tar := range []string{app, pause} {
		if code, _, stderr := d.Ctr("images", "import", "--snapshotter", "native", tar); code != 0 {
			fatal(fmt.Errorf("ctr import: %s", stderr))
		}
	}
	conn, err := grpc.Dial("unix://"+d.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fatal(err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	home := filepath.Join(work, "smolhome")
	var pods, runs []float64
	logf := func(format string, args ...any) { fmt.Printf("bench-shim: "+format+"\n", args...) }
	res := rounds.Run(*n, 3, func(i int) error {
		p, err := podStart(rt, i)
		if err != nil {
			return fmt.Errorf("%w; containerd log ends:\n%s", err, d.Log())
		}
		cmd := exec.Command(*smolBin, "run", "--cpus", "2", "--mem", "2G", "--", "true")
		cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("smol run: %v: %s", err, out)
		}
		r := ms(time.Since(start))
		pods, runs = append(pods, p), append(runs, r)
		fmt.Printf("round %d: pod start %.0f ms, smol run -- true %.0f ms\n", i, p, r)
		return nil
	}, logf)
	fmt.Printf("rounds: %s\n", res.Summary(*n))
	fmt.Printf("pod start (RunPodSandbox + first container running) median %.0f ms, smol run -- true %.0f ms (same shape, 2 vCPUs, 2 GiB): ratio %.2f (target <= 1.3)\n",
		stats.Median(pods), stats.Median(runs), stats.Median(pods)/stats.Median(runs))
}

// podStart times one pod with one container to StartContainer's answer,
// then removes the pod (untimed).
func podStart(rt cri.RuntimeServiceClient, i int) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := &cri.PodSandboxConfig{
		Metadata: &cri.PodSandboxMetadata{Name: fmt.Sprintf("bench-%d", i), Uid: fmt.Sprintf("uid-%d", i), Namespace: "default"},
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}}},
	}
	start := time.Now()
	sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "smol"})
	if err != nil {
		return 0, fmt.Errorf("RunPodSandbox: %w", err)
	}
	defer func() {
		rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	}()
	c, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: cfg,
		Config: &cri.ContainerConfig{Metadata: &cri.ContainerMetadata{Name: "app"}, Image: &cri.ImageSpec{Image: "docker.io/bench/busybox:1"},
			Command: []string{"sleep", "100000"}}})
	if err != nil {
		return 0, fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		return 0, fmt.Errorf("StartContainer: %w", err)
	}
	return ms(time.Since(start)), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

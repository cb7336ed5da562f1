// Command shim measures a pod start through containerd's CRI plugin and
// smol's shim (RunPodSandbox, CreateContainer and StartContainer of one
// container, until the container's first output is in its log) against
// `smol run -- true` in the same session, alternating, and prints the
// ratio (target ≤ 1.3), and each CRI call's time.
// containerd is Debian's, started privately (internal/containerdtest).
//
// Run it where /dev/kvm boots Linux; on this project's machines that is
// the test box: make bench-shim.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	local := flag.Bool("local", true, "run copies of both binaries from the work directory (see copyBinaries)")
	logTo := flag.String("log", "", "copy containerd's log (with the shim's) to this file at the end")
	sharePID := flag.Bool("share-pid", false, "one PID namespace for the pod (a pod with shareProcessNamespace); kubelet's default is one per container")
	trace := flag.Bool("trace", false, "print each round's timeline: the shim's and VMM's process starts, the VMM's start-up phases, the CRI answers (see trace.go)")
	flag.Parse()
	if *trace {
		os.Setenv("SMOL_STARTUP_TRACE", "1") // containerd's, so the shims' and their VMMs'
	}
	work, err := os.MkdirTemp("", "smol-bench-shim-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	shim, _ := filepath.Abs(*shimBin)
	if *local {
		if shim, *smolBin, err = copyBinaries(work, shim, *smolBin); err != nil {
			fatal(err)
		}
	}
	d, err := containerdtest.Start(work, shim, true)
	if err != nil {
		fatal(err)
	}
	defer d.Close()
	if *logTo != "" {
		defer func() {
			if b, err := os.ReadFile(filepath.Join(d.Dir, "containerd.log")); err == nil {
				os.WriteFile(*logTo, b, 0o644)
			}
		}()
	}
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
	var pods, answered, runs []float64
	var sandboxes, creates, starts []float64
	logf := func(format string, args ...any) { fmt.Printf("bench-shim: "+format+"\n", args...) }
	res := rounds.Run(*n, 3, func(i int) error {
		var observe func() []milestone
		if *trace {
			observe = func() []milestone {
				ms := append(shimProcesses("the shim's server", filepath.Base(shim), "-address"),
					shimProcesses("the machine's VMM", filepath.Base(shim), "__vmm")...)
				return append(ms, startupPhases(vmmLogs(d.ShimRoot()), time.Now(), "VMM: ")...)
			}
		}
		p, err := podStart(rt, i, filepath.Join(work, "logs", strconv.Itoa(i)), *sharePID, observe)
		if err == nil {
			sandboxes, creates, starts = append(sandboxes, p.sandbox), append(creates, p.create), append(starts, p.start)
		}
		if err != nil {
			return fmt.Errorf("%w; containerd log ends:\n%s", err, d.Log())
		}
		cmd := exec.Command(*smolBin, "run", "--cpus", "2", "--mem", "2G", "--", "true")
		cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("smol run: %v: %s", err, out)
		}
		r := ms(time.Since(start))
		if *trace {
			printTimeline(fmt.Sprintf("round %d, pod", i), p.began, p.timeline)
			printTimeline(fmt.Sprintf("round %d, smol run -- true", i), start,
				append(startupPhases(out, start, ""), milestone{start.Add(time.Duration(r * float64(time.Millisecond))), "exited"}))
		}
		pods, answered, runs = append(pods, p.output), append(answered, p.answered()), append(runs, r)
		fmt.Printf("round %d: pod start %.0f ms to the container's first output (RunPodSandbox %.0f, CreateContainer %.0f, StartContainer %.0f: %.0f to its answer), smol run -- true %.0f ms\n",
			i, p.output, p.sandbox, p.create, p.start, p.answered(), r)
		return nil
	}, logf)
	fmt.Printf("rounds: %s\n", res.Summary(*n))
	fmt.Printf("pod start (RunPodSandbox to the first container's first output) median %.0f ms, smol run -- true %.0f ms (same shape, 2 vCPUs, 2 GiB): ratio %.2f (target <= 1.3)\n",
		stats.Median(pods), stats.Median(runs), stats.Median(pods)/stats.Median(runs))
	fmt.Printf("pod start's steps, medians: RunPodSandbox %.0f ms, CreateContainer %.0f ms, StartContainer %.0f ms; to StartContainer's answer %.0f ms (ratio %.2f)\n",
		stats.Median(sandboxes), stats.Median(creates), stats.Median(starts), stats.Median(answered), stats.Median(answered)/stats.Median(runs))
}

// podTimes is one pod start, step by step (ms).
type podTimes struct {
	sandbox, create, start float64 // each CRI call
	output                 float64 // from RunPodSandbox to the container's first line in its log
	began                  time.Time
	timeline               []milestone // with -trace
}

func (p podTimes) answered() float64 { return p.sandbox + p.create + p.start }

// podStart times one pod with one container, each CRI call on its own and
// until the container's first output reaches its log in logDir (what
// shows it runs: StartContainer's answer only says it was started), then
// removes the pod (untimed). The pod's namespaces are what kubelet asks
// for a pod with hostNetwork (the bench has no CNI): the node's network,
// and a PID namespace per container unless sharePID (a pod with
// shareProcessNamespace).
//
// observe, if not nil, is called once the container's output is there,
// before the pod is removed, for what the round's timeline adds to the
// CRI answers.
func podStart(rt cri.RuntimeServiceClient, i int, logDir string, sharePID bool, observe func() []milestone) (podTimes, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pid := cri.NamespaceMode_CONTAINER
	if sharePID {
		pid = cri.NamespaceMode_POD
	}
	cfg := &cri.PodSandboxConfig{
		Metadata: &cri.PodSandboxMetadata{Name: fmt.Sprintf("bench-%d", i), Uid: fmt.Sprintf("uid-%d", i), Namespace: "default"},
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, Pid: pid}}},
		LogDirectory: logDir,
	}
	var t podTimes
	began := time.Now()
	t.began = began
	start := began
	answered := func(what string) {
		t.timeline = append(t.timeline, milestone{time.Now(), what})
	}
	sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "smol"})
	if err != nil {
		return t, fmt.Errorf("RunPodSandbox: %w", err)
	}
	t.sandbox = ms(time.Since(start))
	answered("RunPodSandbox answered")
	defer func() {
		rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	}()
	start = time.Now()
	c, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: cfg,
		Config: &cri.ContainerConfig{Metadata: &cri.ContainerMetadata{Name: "app"}, Image: &cri.ImageSpec{Image: "docker.io/bench/busybox:1"},
			Command: []string{"sh", "-c", "echo up; exec sleep 100000"}, LogPath: "app.log"}})
	if err != nil {
		return t, fmt.Errorf("CreateContainer: %w", err)
	}
	t.create = ms(time.Since(start))
	answered("CreateContainer answered")
	start = time.Now()
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		return t, fmt.Errorf("StartContainer: %w", err)
	}
	t.start = ms(time.Since(start))
	answered("StartContainer answered")
	for {
		if b, _ := os.ReadFile(filepath.Join(logDir, "app.log")); strings.Contains(string(b), " up") {
			t.output = ms(time.Since(began))
			answered("the container's first output in its log")
			if observe != nil {
				t.timeline = append(t.timeline, observe()...)
			}
			return t, nil
		}
		if ctx.Err() != nil {
			return t, errors.New("the container wrote nothing to its log")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// copyBinaries copies the shim and smol into dir and returns the copies'
// paths. In the test box the tree comes over 9p with cache=mmap, which
// drops a file's pages once no process holds it, so every exec reads its
// binary afresh from the host: a cost no real host has (its binaries sit
// in the page cache) and one the pod pays three times (containerd's
// `shim start`, the shim's server, the machine's VMM process) where
// `smol run` pays it once. From the work directory (tmpfs in the box),
// both contenders start like installed programs.
func copyBinaries(dir, shim, smol string) (string, string, error) {
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", "", err
	}
	var out []string
	for _, src := range []string{shim, smol} {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", "", err
		}
		dst := filepath.Join(bin, filepath.Base(src))
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return "", "", err
		}
		out = append(out, dst)
	}
	return out[0], out[1], nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

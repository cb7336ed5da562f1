// Command critest runs Kubernetes' CRI validation suite (critest, from
// sigs.k8s.io/cri-tools, built by scripts/build-critest.sh) against one
// private containerd twice, with runc and with smol's shim as the runtime
// handler, and prints each one's pass and fail counts and the failures.
//
// Offline: the images the suite pulls are served by a registry in this
// process (go-containerregistry's), under the suite's names behind
// -registry-prefix. They are made here from the host's static busybox,
// with the users, groups and web servers the suite expects; the few the
// suite names by digest cannot be made and fail for every runtime alike.
//
// Run it where /dev/kvm boots Linux; on this project's machines that is
// the test box: make critest.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/smolvm/smol/internal/containerdtest"
	"golang.org/x/sys/unix"
)

func main() {
	if filepath.Base(os.Args[0]) == nnpName {
		nnp()
		return
	}
	critest := flag.String("critest", "build/critest", "the critest binary")
	shim := flag.String("shim", "bin/containerd-shim-smol-v2", "smol's shim")
	runtimes := flag.String("runtimes", "runc,smol", "runtime handlers to run the suite with, in order")
	focus := flag.String("focus", "", "run only the specs matching this regular expression (ginkgo.focus)")
	daemonLog := flag.Bool("daemon-log", false, "print containerd's log (with the shims' lines) after the suite")
	seed := flag.Int64("seed", 0, "the suite's spec order (ginkgo.seed; 0: a random one, printed): two runs with one seed run their specs in the same order, so a run cut short compares with the same specs of another")
	cniBin := flag.String("cni", "/usr/lib/cni", "the CNI plugins (Debian's containernetworking-plugins)")
	flag.Parse()
	if err := run(*critest, *shim, *cniBin, *focus, *seed, strings.Split(*runtimes, ","), *daemonLog); err != nil {
		fmt.Fprintln(os.Stderr, "critest:", err)
		os.Exit(1)
	}
}

func run(critest, shim, cniBin, focus string, seed int64, runtimes []string, printDaemonLog bool) error {
	for _, p := range []*string{&critest, &shim} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("%s: %w (make critest builds it)", *p, err)
		}
		*p = abs
	}
	work, err := os.MkdirTemp("", "smol-critest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(discardLogger())), ReadHeaderTimeout: time.Minute}
	go srv.Serve(l)
	defer srv.Close()
	host := l.Addr().String()
	if err := pushImages(host); err != nil {
		return fmt.Errorf("the suite's images: %w", err)
	}

	if err := mountCgroups(); err != nil {
		return err
	}
	d, err := containerdtest.StartWith(work, shim, containerdtest.Options{CRI: true, Runc: true, CNIBin: cniBin, PlainHTTP: []string{host}})
	if err != nil {
		return err
	}
	defer d.Close()
	for _, write := range []func(string) (string, error){pauseImage, nginxImage, noNewPrivsImage} {
		tarball, err := write(work)
		if err != nil {
			return err
		}
		if code, _, stderr := d.Ctr("images", "import", "--snapshotter", "native", tarball); code != 0 {
			return fmt.Errorf("ctr import: %s", stderr)
		}
	}
	// The suite pulls these by path only (so as :latest, see pushImages)
	// and then creates containers by the names given here: both must be
	// :latest to meet.
	images := filepath.Join(work, "images.yaml")
	if err := os.WriteFile(images, []byte(fmt.Sprintf("defaultTestContainerImage: %s/e2e-test-images/busybox:latest\nwebServerTestImage: %s/e2e-test-images/nginx:latest\n", host, host)), 0o644); err != nil {
		return err
	}

	var results []result
	for _, rt := range runtimes {
		fmt.Printf("== critest with the runtime handler %s\n", rt)
		began := time.Now()
		r, err := suite(critest, d.Sock, rt, host, images, focus, seed, filepath.Join(work, "report-"+rt), d.Log)
		if err != nil {
			return fmt.Errorf("%s: %w", rt, err)
		}
		r.took = time.Since(began)
		results = append(results, r)
	}
	if printDaemonLog {
		fmt.Printf("== containerd's log\n%s\n", d.Log())
	}
	fmt.Println()
	for _, r := range results {
		fmt.Printf("%s: %d of %d specs passed, %d failed, %d skipped (%s)\n", r.runtime, r.passed, r.ran, r.failed, r.skipped, r.took.Round(time.Second))
		for _, f := range r.failures {
			fmt.Printf("  failed: %s\n", f)
		}
	}
	return nil
}

// result is one run of the suite.
type result struct {
	runtime                      string
	ran, passed, failed, skipped int
	failures                     []string
	took                         time.Duration
}

// summary is ginkgo's closing line: "Ran 76 of 82 Specs in 97.5 seconds"
// and then "FAIL! -- 70 Passed | 6 Failed | 0 Pending | 6 Skipped".
var (
	ranLine    = regexp.MustCompile(`Ran (\d+) of (\d+) Specs`)
	countsLine = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed \| \d+ Pending \| (\d+) Skipped`)
	failLine   = regexp.MustCompile(`^\s*\[FAIL\] (.*)$`)
)

// suite runs critest once; when it prints nothing for quietLimit (a spec
// hangs), containerd's log's last lines are printed, the shim's side.
func suite(critest, sock, runtime, registryHost, images, focus string, seed int64, reportDir string, daemonLog func() string) (result, error) {
	args := []string{
		"-runtime-endpoint", "unix://" + sock, "-image-endpoint", "unix://" + sock,
		"-runtime-handler", runtime, "-registry-prefix", registryHost,
		"-test-images-file", images, "-report-dir", reportDir,
		"-ginkgo.no-color", "-ginkgo.timeout", "2h",
		// A spec that hangs says where, and with what, every 2 minutes.
		"-ginkgo.poll-progress-after", "2m", "-ginkgo.poll-progress-interval", "2m",
	}
	if focus != "" {
		args = append(args, "-ginkgo.focus", focus)
	}
	if seed != 0 {
		args = append(args, "-ginkgo.seed", strconv.FormatInt(seed, 10))
	}
	cmd := exec.Command(critest, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	r := result{runtime: runtime}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	summarized, listing := false, false
	quiet := time.AfterFunc(quietLimit, func() { printQuiet(daemonLog()) })
	defer quiet.Stop()
	for sc.Scan() {
		quiet.Reset(quietLimit)
		line := sc.Text()
		fmt.Println(line)
		if m := ranLine.FindStringSubmatch(line); m != nil {
			fmt.Sscan(m[1], &r.ran)
		}
		if m := countsLine.FindStringSubmatch(line); m != nil {
			fmt.Sscan(m[1], &r.passed)
			fmt.Sscan(m[2], &r.failed)
			fmt.Sscan(m[3], &r.skipped)
			summarized = true
		}
		if strings.Contains(line, "Summarizing") && strings.Contains(line, "Failure") {
			listing = true
		}
		if m := failLine.FindStringSubmatch(line); m != nil && listing && !summarized {
			r.failures = append(r.failures, strings.TrimSpace(m[1]))
		}
	}
	cmd.Wait() // non-zero whenever a spec failed: the counts say how it went
	if !summarized {
		return r, fmt.Errorf("critest ended without its summary")
	}
	return r, nil
}

// quietLimit is how long critest may print nothing before containerd's
// log is shown.
const quietLimit = 3 * time.Minute

// printQuiet prints the last lines of containerd's log.
func printQuiet(log string) {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	lines = lines[max(0, len(lines)-40):]
	fmt.Printf("== critest quiet for %v; containerd's log ends:\n%s\n", quietLimit, strings.Join(lines, "\n"))
}

// mountCgroups mounts the cgroup v2 hierarchy where runc looks for it when
// nothing has (the test box's init mounts no cgroups, and runc then
// refuses every container: "no cgroup mount found in mountinfo").
func mountCgroups() error {
	const dir = "/sys/fs/cgroup"
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return nil
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount cgroup2 on %s (runc needs it): %w", dir, err)
	}
	return nil
}

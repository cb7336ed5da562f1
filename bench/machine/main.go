// Command machine measures persistent machines against their peers in the
// same session, and prints the ratios:
//
//   - exec: `smol machine exec NAME -- true`, process start to exit,
//     against `smol run -- true` (a whole VM for one command). Target
//     ≤ 0.05. The control API's exec round trip alone (no CLI process)
//     is reported too.
//   - start: `smol machine start` of a created machine against `smol run
//     -- true`. Target ≤ 1.1.
//   - cp: `smol machine cp` of a 100 MiB file into the guest against
//     `cat file | smol machine exec NAME -i -- sh -c 'cat > f'`, and out.
//     Target ≥ 0.8; MB/s both ways.
//   - idle memory: an idle machine's VMM resident memory outside guest
//     RAM. Target ≤ 15 MiB.
//
// Run it where /dev/kvm can boot Linux; on this project's machines that is
// the test box: make bench-machine.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/internal/imagetest"
)

func main() {
	n := flag.Int("n", 5, "runs of each kind")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	writeImage := flag.String("write-image", "", "only write the benchmark's busybox image (a docker-save tarball) to this path")
	flag.Parse()
	if *writeImage != "" {
		if err := busyboxImage(*writeImage); err != nil {
			fatal(err)
		}
		return
	}
	bin, err := filepath.Abs(*smolBin)
	if err != nil {
		fatal(err)
	}
	home, err := os.MkdirTemp("", "smol-bench-machine-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(home)
	b := &bench{bin: bin, home: home}
	img := filepath.Join(home, "img.tar")
	if err := busyboxImage(img); err != nil {
		fatal(err)
	}
	b.must("pull", img)

	// exec and run, alternating; the machine runs throughout.
	b.must("machine", "create", "bench", "--image", img, "--cpus", "1", "--mem", "512M", "--storage", "2G")
	b.must("machine", "start", "bench")
	var execMs, runMs, apiMs []float64
	for i := 0; i < *n; i++ {
		execMs = append(execMs, b.timed("machine", "exec", "bench", "--", "true"))
		runMs = append(runMs, b.timed("run", "--cpus", "1", "--mem", "512M", "--", "true"))
		apiMs = append(apiMs, b.apiExec("bench"))
		fmt.Printf("round %d: machine exec %.1f ms, API exec %.1f ms, run %.1f ms\n", i+1, execMs[i], apiMs[i], runMs[i])
	}
	fmt.Printf("machine exec -- true median %.1f ms (control API round trip %.1f ms), smol run -- true %.1f ms: ratio %.3f (target <= 0.05)\n",
		median(execMs), median(apiMs), median(runMs), median(execMs)/median(runMs))

	// Idle memory of the VMM, outside guest RAM.
	time.Sleep(2 * time.Second)
	fmt.Printf("idle machine VMM resident memory outside guest RAM: %.1f MiB (target <= 15)\n", b.vmmRSS("bench"))

	// cp against a cat pipe, 100 MiB each way.
	src := filepath.Join(home, "blob")
	blob := make([]byte, 100<<20)
	rand.Read(blob)
	os.WriteFile(src, blob, 0o644)
	var cpIn, catIn, cpOut, catOut []float64
	for i := 0; i < *n; i++ {
		cpIn = append(cpIn, b.timed("machine", "cp", src, "bench:/root/blob"))
		catIn = append(catIn, b.timedStdin(src, "machine", "exec", "bench", "-i", "--", "sh", "-c", "cat > /root/blob2"))
		out := filepath.Join(home, "out")
		os.RemoveAll(out)
		cpOut = append(cpOut, b.timed("machine", "cp", "bench:/root/blob", out))
		catOut = append(catOut, b.timedDiscard("machine", "exec", "bench", "--", "cat", "/root/blob"))
		fmt.Printf("round %d: cp in %.0f ms, cat in %.0f ms, cp out %.0f ms, cat out %.0f ms\n", i+1, cpIn[i], catIn[i], cpOut[i], catOut[i])
	}
	mbps := func(ms float64) float64 { return 100 * 1.048576 / (ms / 1000) }
	fmt.Printf("cp in: %.0f MB/s, cat pipe in %.0f MB/s: ratio %.2f (target >= 0.8)\n", mbps(median(cpIn)), mbps(median(catIn)), median(catIn)/median(cpIn))
	fmt.Printf("cp out: %.0f MB/s, cat out %.0f MB/s: ratio %.2f\n", mbps(median(cpOut)), mbps(median(catOut)), median(catOut)/median(cpOut))

	// start against run.
	var startMs, run2Ms []float64
	b.must("machine", "stop", "bench")
	for i := 0; i < *n; i++ {
		startMs = append(startMs, b.timed("machine", "start", "bench"))
		b.must("machine", "stop", "bench")
		run2Ms = append(run2Ms, b.timed("run", "--cpus", "1", "--mem", "512M", "--", "true"))
		fmt.Printf("round %d: machine start %.0f ms, run %.0f ms\n", i+1, startMs[i], run2Ms[i])
	}
	fmt.Printf("machine start median %.0f ms, smol run -- true %.0f ms: ratio %.2f (target <= 1.1)\n", median(startMs), median(run2Ms), median(startMs)/median(run2Ms))
	b.must("machine", "rm", "-f", "bench")
}

type bench struct{ bin, home string }

func (b *bench) cmd(args ...string) *exec.Cmd {
	c := exec.Command(b.bin, args...)
	c.Env = append(os.Environ(), "SMOL_HOME="+b.home)
	return c
}

func (b *bench) must(args ...string) {
	if out, err := b.cmd(args...).CombinedOutput(); err != nil {
		fatal(fmt.Errorf("smol %s: %v: %s", strings.Join(args, " "), err, out))
	}
}

func (b *bench) run(c *exec.Cmd, what []string) float64 {
	var errb bytes.Buffer
	c.Stderr = &errb
	start := time.Now()
	if err := c.Run(); err != nil {
		logs, _ := b.cmd("machine", "logs", "bench").Output()
		if lines := strings.Split(string(logs), "\n"); len(lines) > 30 {
			logs = []byte(strings.Join(lines[len(lines)-30:], "\n"))
		}
		fatal(fmt.Errorf("smol %s: %v: %s\nthe machine's console ends:\n%s", strings.Join(what, " "), err, errb.String(), logs))
	}
	return float64(time.Since(start).Microseconds()) / 1000
}

func (b *bench) timed(args ...string) float64 { return b.run(b.cmd(args...), args) }

func (b *bench) timedStdin(file string, args ...string) float64 {
	f, err := os.Open(file)
	if err != nil {
		fatal(err)
	}
	defer f.Close()
	c := b.cmd(args...)
	c.Stdin = f
	return b.run(c, args)
}

func (b *bench) timedDiscard(args ...string) float64 {
	c := b.cmd(args...)
	c.Stdout = nil // /dev/null
	return b.run(c, args)
}

// apiExec times one exec through the Go API: the control API round trip
// without a CLI process.
func (b *bench) apiExec(name string) float64 {
	os.Setenv("SMOL_HOME", b.home)
	m, err := smol.OpenMachine(name)
	if err != nil {
		fatal(err)
	}
	start := time.Now()
	if code, err := m.Exec(context.Background(), smol.Command{Args: []string{"true"}}); err != nil || code != 0 {
		fatal(fmt.Errorf("API exec: %d %v", code, err))
	}
	return float64(time.Since(start).Microseconds()) / 1000
}

// vmmRSS is the machine's VMM resident memory minus its resident shared
// memory (guest RAM is a shared memfd mapping), in MiB.
func (b *bench) vmmRSS(name string) float64 {
	os.Setenv("SMOL_HOME", b.home)
	m, err := smol.OpenMachine(name)
	if err != nil {
		fatal(err)
	}
	s, err := m.Status(context.Background())
	if err != nil {
		fatal(err)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID))
	if err != nil {
		fatal(err)
	}
	var rss, shmem float64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "RssShmem:":
			shmem = v
		}
	}
	return (rss - shmem) / 1024
}

// busyboxImage writes a docker-save tarball of Debian's static busybox.
func busyboxImage(out string) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("static busybox: %w", err)
	}
	bin := imagetest.File("bin/busybox", string(bb))
	bin.Mode = 0o755
	entries := []imagetest.Entry{imagetest.Dir("bin/"), bin, imagetest.Dir("root/"), imagetest.Dir("tmp/")}
	for _, a := range []string{"sh", "cat", "true"} {
		entries = append(entries, imagetest.Symlink("bin/"+a, "busybox"))
	}
	l, err := imagetest.Layer(entries...)
	if err != nil {
		return err
	}
	img, err := imagetest.Image("amd64", v1.Config{Env: []string{"PATH=/bin"}}, l)
	if err != nil {
		return err
	}
	tag, _ := name.NewTag("bench/busybox:1")
	return tarball.WriteToFile(out, tag, img)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

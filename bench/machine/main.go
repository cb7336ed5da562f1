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
//   - fork: `smol machine fork` to a child answering `exec -- true`
//     against `smol run -- true`. Target ≤ 0.1. Then 8 children of a
//     guest that filled 512 MiB: each child's private memory (target ≤
//     what it dirtied + 10 MiB) and PSS.
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
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/benchimage"
	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/bench/internal/stats"
)

func main() {
	n := flag.Int("n", 5, "runs of each kind")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	writeImage := flag.String("write-image", "", "only write the benchmark's busybox image (a docker-save tarball) to this path")
	flag.Parse()
	if *writeImage != "" {
		if err := benchimage.Busybox(*writeImage); err != nil {
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
	if err := benchimage.Busybox(img); err != nil {
		fatal(err)
	}
	b.must("pull", img)
	logf := func(format string, args ...any) { fmt.Printf("bench-machine: "+format+"\n", args...) }
	const maxReplaced = 3

	// exec and run, alternating; the machine runs throughout.
	b.must("machine", "create", "bench", "--image", img, "--cpus", "1", "--mem", "512M", "--storage", "2G")
	b.must("machine", "start", "bench")
	var execMs, runMs, apiMs []float64
	res := rounds.Run(*n, maxReplaced, func(i int) error {
		e, err := b.timed("machine", "exec", "bench", "--", "true")
		if err != nil {
			return b.recover(err)
		}
		r, err := b.timed("run", "--cpus", "1", "--mem", "512M", "--", "true")
		if err != nil {
			return err
		}
		a, err := b.apiExec("bench")
		if err != nil {
			return b.recover(err)
		}
		execMs, runMs, apiMs = append(execMs, e), append(runMs, r), append(apiMs, a)
		fmt.Printf("round %d: machine exec %.1f ms, API exec %.1f ms, run %.1f ms\n", i, e, a, r)
		return nil
	}, logf)
	fmt.Printf("exec rounds: %s\n", res.Summary(*n))
	fmt.Printf("machine exec -- true median %.1f ms (control API round trip %.1f ms), smol run -- true %.1f ms: ratio %.3f (target <= 0.05)\n",
		median(execMs), median(apiMs), median(runMs), median(execMs)/median(runMs))

	// fork to an exec in the child, against run; then what children cost.
	b.forkRounds(*n, maxReplaced, logf)
	b.forkMemory(img)

	// Idle memory of the VMM, outside guest RAM.
	time.Sleep(2 * time.Second)
	fmt.Printf("idle machine VMM resident memory outside guest RAM: %.1f MiB (target <= 15)\n", b.vmmRSS("bench"))

	// cp against a cat pipe, 100 MiB each way.
	src := filepath.Join(home, "blob")
	blob := make([]byte, 100<<20)
	rand.Read(blob)
	os.WriteFile(src, blob, 0o644)
	var cpIn, catIn, cpOut, catOut []float64
	out := filepath.Join(home, "out")
	res = rounds.Run(*n, maxReplaced, func(i int) error {
		os.RemoveAll(out)
		var t [4]float64
		var err error
		steps := []func() (float64, error){
			func() (float64, error) { return b.timed("machine", "cp", src, "bench:/root/blob") },
			func() (float64, error) {
				return b.timedStdin(src, "machine", "exec", "bench", "-i", "--", "sh", "-c", "cat > /root/blob2")
			},
			func() (float64, error) { return b.timed("machine", "cp", "bench:/root/blob", out) },
			func() (float64, error) { return b.timedDiscard("machine", "exec", "bench", "--", "cat", "/root/blob") },
		}
		for k, step := range steps {
			if t[k], err = step(); err != nil {
				return b.recover(err)
			}
		}
		cpIn, catIn, cpOut, catOut = append(cpIn, t[0]), append(catIn, t[1]), append(cpOut, t[2]), append(catOut, t[3])
		fmt.Printf("round %d: cp in %.0f ms, cat in %.0f ms, cp out %.0f ms, cat out %.0f ms\n", i, t[0], t[1], t[2], t[3])
		return nil
	}, logf)
	fmt.Printf("cp rounds: %s\n", res.Summary(*n))
	mbps := func(ms float64) float64 { return 100 * 1.048576 / (ms / 1000) }
	fmt.Printf("cp in: %.0f MB/s, cat pipe in %.0f MB/s: ratio %.2f (target >= 0.8)\n", mbps(median(cpIn)), mbps(median(catIn)), median(catIn)/median(cpIn))
	fmt.Printf("cp out: %.0f MB/s, cat out %.0f MB/s: ratio %.2f\n", mbps(median(cpOut)), mbps(median(catOut)), median(catOut)/median(cpOut))

	// start against run.
	var startMs, run2Ms []float64
	b.cmd("machine", "stop", "bench").Run()
	res = rounds.Run(*n, maxReplaced, func(i int) error {
		st, err := b.timed("machine", "start", "bench")
		if err != nil {
			return err
		}
		if _, err := b.timed("machine", "stop", "bench"); err != nil {
			return err
		}
		r, err := b.timed("run", "--cpus", "1", "--mem", "512M", "--", "true")
		if err != nil {
			return err
		}
		startMs, run2Ms = append(startMs, st), append(run2Ms, r)
		fmt.Printf("round %d: machine start %.0f ms, run %.0f ms\n", i, st, r)
		return nil
	}, logf)
	fmt.Printf("start rounds: %s\n", res.Summary(*n))
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

// run times one smol command; a failure carries the machine's state and
// the end of its console, for the report.
func (b *bench) run(c *exec.Cmd, what []string) (float64, error) {
	var errb bytes.Buffer
	c.Stderr = &errb
	start := time.Now()
	if err := c.Run(); err != nil {
		logs, _ := b.cmd("machine", "logs", "bench").Output()
		tail := strings.Split(strings.TrimSpace(string(logs)), "\n")
		if len(tail) > 8 {
			tail = tail[len(tail)-8:]
		}
		return 0, fmt.Errorf("smol %s: %v: %s; the machine's console ends:\n    %s", strings.Join(what, " "), err,
			strings.TrimSpace(errb.String()), strings.Join(tail, "\n    "))
	}
	return float64(time.Since(start).Microseconds()) / 1000, nil
}

// recover restarts the machine after a failed round (a guest that died
// in the box, its known failure), so that the next round has one.
func (b *bench) recover(err error) error {
	b.cmd("machine", "stop", "--timeout", "2s", "bench").Run()
	if serr := b.cmd("machine", "start", "bench").Run(); serr != nil {
		fatal(fmt.Errorf("%v; and the machine does not start again: %v", err, serr))
	}
	return err
}

func (b *bench) timed(args ...string) (float64, error) { return b.run(b.cmd(args...), args) }

func (b *bench) timedStdin(file string, args ...string) (float64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	c := b.cmd(args...)
	c.Stdin = f
	return b.run(c, args)
}

func (b *bench) timedDiscard(args ...string) (float64, error) {
	c := b.cmd(args...)
	c.Stdout = nil // /dev/null
	return b.run(c, args)
}

// apiExec times one exec through the Go API: the control API round trip
// without a CLI process.
func (b *bench) apiExec(name string) (float64, error) {
	os.Setenv("SMOL_HOME", b.home)
	m, err := smol.OpenMachine(name)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if code, err := m.Exec(context.Background(), smol.Command{Args: []string{"true"}}); err != nil || code != 0 {
		return 0, fmt.Errorf("API exec: %d %v", code, err)
	}
	return float64(time.Since(start).Microseconds()) / 1000, nil
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
	return stats.ReadProcMem(s.PID).VMM()
}

// median is the figure quoted (bench/internal/stats).
var median = stats.Median

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

// Command flood counts guest deaths under a serial-console flood, smol
// against QEMU's microvm machine, in one session: the comparison the
// project asks for before a guest death is called the test box's.
//
// Each guest boots the same kernel and an initramfs whose /etc/rc writes
// -lines lines of text to the console from user space (interrupt-driven
// transmit through the 16550A: an exit per byte and a transmitter-empty
// interrupt per FIFO load, delivered while the guest runs), then prints
// a last line and powers off. Every round runs one smol guest, one QEMU
// guest and one of each -also build, in rotating order, with the same
// vCPUs and memory; smol keeps its default devices unless -bare, and
// QEMU gets the same ones (virtio-rng, virtio-balloon with free page
// reporting) unless -bare.
//
// A guest's run ends one of three ways:
//
//	finished  its last line arrived and its VMM exited 0
//	died      its VMM exited before the last line: for smol, with its
//	          "triple-faulted" error when the guest reset; QEMU, given
//	          -no-reboot, exits 0 on the same reset, so a QEMU guest that
//	          exits early with status 0 reset (the console is cut
//	          mid-line either way, with no panic)
//	hung      no end within -timeout: killed
//
// BENCHMARKS.md ("The serial flood") has what it found in the nested
// test box. Run it there:
//
//	bin/smolbox "bin/bench-flood -n 15"
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
	"github.com/smolvm/smol/bench/internal/stats"
)

const doneLine = "smol-flood-done"

func main() {
	n := flag.Int("n", 15, "rounds (each runs one smol and one QEMU guest)")
	lines := flag.Int("lines", 2000, "lines each guest writes to its console")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel (vmlinux with a PVH note; QEMU needs one)")
	initPath := flag.String("init", "build/init", "guest init binary")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	cpus := flag.Int("cpus", 1, "vCPUs")
	mem := flag.String("mem", "512M", "guest memory")
	bare := flag.Bool("bare", false, "no virtio devices: smol --no-default-devices, QEMU without virtio-rng and virtio-balloon")
	only := flag.String("only", "", "comma-separated: run only these (smol, qemu-microvm, -also NAMEs)")
	timeout := flag.Duration("timeout", 5*time.Minute, "a guest that has not ended by then is hung")
	var also guestrun.Builds
	flag.Var(&also, "also", "NAME=PATH: another smol build (or a wrapper script) to run in every round, with smol's arguments (repeatable)")
	flag.Parse()

	initrd, err := guestrun.WriteInitramfs(*initPath, floodRC(*lines))
	if err != nil {
		fatal(err)
	}
	defer os.Remove(initrd)
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		fatal(err)
	}
	smolArgs := []string{"run", "--kernel", *kernel, "--initrd", initrd, "--cpus", strconv.Itoa(*cpus), "--mem", *mem}
	qemuArgs := []string{
		"-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", strconv.Itoa(*cpus), "-m", strconv.FormatUint(memBytes>>20, 10),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-kernel", *kernel, "-initrd", initrd, "-append", smol.DefaultCmdline,
	}
	if *bare {
		smolArgs = append(smolArgs, "--no-default-devices")
	} else {
		qemuArgs = append(qemuArgs, guestrun.QEMUDefaultDevices...)
	}
	vmms := []*vmm{{name: "smol", bin: *smolBin, args: smolArgs}, {name: "qemu-microvm", bin: *qemuBin, args: qemuArgs}}
	for _, a := range also {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" || path == "" {
			fatal(fmt.Errorf("-also %q: want NAME=PATH", a))
		}
		vmms = append(vmms, &vmm{name: name, bin: path, args: smolArgs})
	}
	if *only != "" {
		var kept []*vmm
		for _, v := range vmms {
			if slices.Contains(strings.Split(*only, ","), v.name) {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			fatal(fmt.Errorf("-only %q matches none of smol, qemu-microvm and the -also NAMEs", *only))
		}
		vmms = kept
	}
	fmt.Printf("flood bench: kernel %s, %d vCPU, %s, %d lines per guest, devices: %s, %d rounds\n",
		*kernel, *cpus, *mem, *lines, map[bool]string{true: "none", false: "virtio-rng, virtio-balloon (free page reporting)"}[*bare], *n)
	for round := 1; round <= *n; round++ {
		for i := range vmms {
			v := vmms[(i+round)%len(vmms)] // rotate which goes first
			r := v.run(*timeout)
			v.results = append(v.results, r)
			fmt.Printf("round %2d: %-12s %-8s %4d lines in %5.1f s%s\n", round, v.name, r.outcome, r.lines, r.secs, r.detail)
		}
	}
	fmt.Println()
	for _, v := range vmms {
		v.summary(*lines)
	}
}

type vmm struct {
	name    string
	bin     string
	args    []string
	results []result
}

type result struct {
	outcome string // finished, died, hung
	lines   int    // flood lines that reached the console
	secs    float64
	detail  string
}

// run boots one guest and watches its console until it ends.
func (v *vmm) run(timeout time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, v.bin, v.args...)
	console := &lineCounter{}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = console, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{lines: console.flood(), secs: time.Since(start).Seconds()}
	switch {
	case ctx.Err() != nil:
		r.outcome = "hung"
	case err == nil && console.done():
		r.outcome = "finished"
	default:
		r.outcome = "died"
		if msg := firstLine(stderr.String()); msg != "" {
			r.detail = ": " + msg
		} else if err != nil {
			r.detail = ": " + err.Error()
		} else {
			r.detail = ": exited 0 before its last line (a guest reset, under -no-reboot)"
		}
	}
	return r
}

func (v *vmm) summary(want int) {
	count := map[string]int{}
	triple := 0
	var rates []float64
	for _, r := range v.results {
		count[r.outcome]++
		if strings.Contains(r.detail, "triple-faulted") {
			triple++
		}
		if r.outcome == "finished" {
			rates = append(rates, float64(want)/r.secs)
		}
	}
	fmt.Printf("%s: %d guests, %d finished, %d died (%d reported as triple faults), %d hung; median %.1f lines/s while finishing\n",
		v.name, len(v.results), count["finished"], count["died"], triple, count["hung"], stats.Median(rates))
}

// lineCounter counts the flood lines of a console and notes the last one.
type lineCounter struct {
	mu      sync.Mutex
	partial []byte
	lines   int
	last    bool
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			if len(c.partial) < 256 {
				c.partial = append(c.partial, b)
			}
			continue
		}
		line := strings.TrimRight(string(c.partial), "\r")
		switch {
		case strings.HasPrefix(line, "flood "):
			c.lines++
		case line == doneLine:
			c.last = true
		}
		c.partial = c.partial[:0]
	}
	return len(p), nil
}

func (c *lineCounter) flood() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines
}

func (c *lineCounter) done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// floodRC is the guest's /etc/rc.
func floodRC(lines int) string {
	return fmt.Sprintf(`i=0
while [ $i -lt %d ]; do
	echo "flood $i 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"
	i=$((i+1))
done
echo %s
poweroff -f
`, lines, doneLine)
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 160 {
				l = l[:160] + "…"
			}
			return l
		}
	}
	return ""
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench-flood:", err)
	os.Exit(1)
}

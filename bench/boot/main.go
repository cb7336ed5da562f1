// Command boot compares how fast smol and QEMU's microvm machine boot the
// same kernel and initramfs to the guest's init, with the same memory,
// vCPUs and devices, in one session. Every round boots each contender
// once, in an order shuffled afresh every round:
//
//	smol               smol with its default devices (entropy, balloon with
//	                   free page reporting)
//	qemu-microvm       QEMU microvm given the same devices on its virtio-mmio:
//	                   -device virtio-rng-device
//	                   -device virtio-balloon-device,free-page-reporting=on
//	smol-bare          smol --no-default-devices (when the binary has it)
//	qemu-microvm-bare  QEMU microvm with no device but the serial port
//	NAME               each -also NAME=PATH: another smol build (say, main's,
//	                   built by make bench-boot BASE=<commit>) with its own
//	                   default devices
//
// and it ends with each one's medians, the ratios
//
//	boot-to-init ratio smol / qemu-microvm (same devices): <r>
//
// and rows for BENCHMARKS.md (date, machine, commit).
//
// "Boot to init" is measured from the moment the VMM process is started to
// the moment a line printed by the guest's init appears on its console: the
// same observable event for every VMM, with no cooperation from any. The
// phases around it are reported too: the binary's own start-up (exec to
// exit of a no-op invocation, run just before each boot), the guest
// kernel's clock when it ran /init (printed by the guest after the timed
// line), and for smol its --boot-time view (its main to first KVM_RUN, and
// to the init's boot-timer write) and its resident memory outside guest
// RAM at the init's line, split into anonymous (private) memory and the
// binary's file-backed pages.
//
// Before each boot the bench writes and frees some tmpfs memory (-settle-mib,
// see package settle): in the test box, a VM that runs right after another is
// slowed by what the previous one left in memory, and without this the
// order of the contenders decides part of the result.
//
// A guest that dies or hangs (a few percent of boots in the test box, for
// either VMM) fails its round, which is reported and replaced by another,
// at most -replace times; the run then ends with the rounds it has.
//
// -diagnose adds, per contender, one boot whose kernel log (initcall_debug,
// read with dmesg after the init line, so the console costs the timed boot
// nothing) gives the guest's timeline and its slowest initcalls, and for
// smol builds one boot with --exit-stats and the VMM's start-up phases
// (SMOL_STARTUP_TRACE=1).
//
// Run it where /dev/kvm can boot Linux; on this project's machines that is
// the test box: make bench-boot.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/bench/internal/settle"
	"github.com/smolvm/smol/bench/internal/stats"
)

const (
	marker    = "smol-bench-init-reached"
	endMarker = "smol-bench-dmesg-end"
)

// timedRC is the timed guest's /etc/rc: the line the bench waits for,
// then (untimed) the kernel's own clock at the moment it started /init.
const timedRC = "echo " + marker + "\ndmesg | grep -m1 'Run /init'\npoweroff -f\n"

// noDefaultDevices is the smol flag that leaves out the entropy and
// balloon devices.
const noDefaultDevices = "--no-default-devices"

type contender struct {
	name    string
	smol    bool
	bin     string
	args    func(initrd, extra string) []string
	samples []sample
}

type sample struct {
	startMs    float64 // exec to exit of the binary doing nothing (its own start-up)
	initMs     float64 // exec to the init's console line
	userMs     float64 // smol only: its start to the init's write of the boot timer, from --boot-time
	kernelMs   float64 // the guest kernel's clock when it ran /init (0: not seen)
	firstRunMs float64 // smol only: exec to first KVM_RUN, from --boot-time
	mem        procMem // smol only: at the init's line
}

func main() {
	n := flag.Int("n", 10, "rounds (each boots every contender once)")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel (vmlinux with a PVH note; QEMU needs one)")
	initPath := flag.String("init", "build/init", "guest init binary")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	cpus := flag.Int("cpus", 1, "vCPUs")
	mem := flag.String("mem", "256M", "guest memory")
	extra := flag.String("cmdline", "", "kernel parameters added for every boot")
	only := flag.String("only", "", "comma-separated contenders to run (default: all)")
	timeout := flag.Duration("timeout", 60*time.Second, "a boot that has not reached init and exited by then is hung (a normal one takes seconds, even in the box)")
	replace := flag.Int("replace", -1, "failed rounds replaced at most (default: n/2, at least 3)")
	diagnose := flag.Bool("diagnose", false, "also boot each contender once with initcall_debug (and smol with --exit-stats) and print the timeline")
	memory := flag.Bool("memory", true, "also measure an 8 GiB guest's host memory, idle and after touching 100 MiB")
	outDir := flag.String("out", "", "with -diagnose: write each contender's kernel log and VMM output here")
	machine := flag.String("machine", "", "CPU model for the report rows (default: this machine's /proc/cpuinfo)")
	commit := flag.String("commit", "", "commit of -smol, for the report rows")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the boot order's shuffle")
	settleMiB := flag.Int("settle-mib", 256, "before each boot, write and free this much tmpfs memory (0: don't; see package settle)")
	var also guestrun.Builds
	flag.Var(&also, "also", "NAME=PATH: another smol build to boot with its default devices (repeatable)")
	flag.Parse()
	if *replace < 0 {
		*replace = max(3, *n/2)
	}
	if *machine == "" {
		*machine = cpuModel()
	}

	initrd, err := guestrun.WriteInitramfs(*initPath, timedRC)
	if err != nil {
		fatal(err)
	}
	defer os.Remove(initrd)
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		fatal(err)
	}
	contenders, err := makeContenders(*smolBin, *qemuBin, *kernel, *cpus, *mem, memBytes, also)
	if err != nil {
		fatal(err)
	}
	if *only != "" {
		names := strings.Split(*only, ",")
		contenders = slices.DeleteFunc(contenders, func(c *contender) bool { return !slices.Contains(names, c.name) })
		if len(contenders) == 0 {
			fatal(fmt.Errorf("-only %q matches no contender", *only))
		}
	}
	var names []string
	for _, c := range contenders {
		names = append(names, c.name)
	}
	fmt.Printf("boot bench: kernel %s, %d vCPU, %s, %d rounds, cmdline %q %s\n", *kernel, *cpus, *mem, *n, smol.DefaultCmdline, *extra)
	fmt.Printf("contenders: %s (order shuffled every round, -seed %d; -settle-mib %d)\n", strings.Join(names, ", "), *seed, *settleMiB)

	shuffle := rand.New(rand.NewPCG(uint64(*seed), 0))
	res := rounds.Run(*n, *replace, func(attempt int) error {
		got := make([]sample, len(contenders))
		// A fresh order every round: in the box, what the previous boot
		// left behind changes the next one's start (see package settle), so no
		// contender may always follow the same one.
		order := shuffle.Perm(len(contenders))
		for _, i := range order {
			c := contenders[i]
			if err := settle.Memory(*settleMiB); err != nil {
				return err
			}
			startMs, err := binaryStart(c)
			if err != nil {
				return err
			}
			s, err := boot(c, c.args(initrd, *extra), *timeout, nil)
			if err != nil {
				return err
			}
			s.startMs = startMs
			got[i] = s
		}
		var line []string
		for _, i := range order {
			c := contenders[i]
			c.samples = append(c.samples, got[i])
			l := fmt.Sprintf("%s %.0f ms (kernel %.0f)", c.name, got[i].initMs, got[i].kernelMs)
			if c.smol {
				l = fmt.Sprintf("%s %.0f ms (KVM_RUN %.0f, kernel %.0f, RSS %.1f MiB)", c.name, got[i].initMs, got[i].firstRunMs, got[i].kernelMs, got[i].mem.VMM())
			}
			line = append(line, l)
		}
		fmt.Printf("round %2d: %s\n", attempt, strings.Join(line, "  "))
		return nil
	}, func(format string, args ...any) { fmt.Printf("bench: "+format+"\n", args...) })

	if *diagnose {
		diagnoseAll(contenders, *initPath, initrd, *extra, *timeout, *outDir)
	}
	if *memory {
		if err := memoryCost(*smolBin, *kernel, *initPath, *timeout); err != nil {
			fmt.Printf("8 GiB guest: %v\n", err)
		}
	}
	report(contenders, res, *n, *machine, *commit)
	if res.Done == 0 || res.Done*2 < *n {
		os.Exit(1)
	}
}

// makeContenders lists what the bench boots, with their command lines.
func makeContenders(smolBin, qemuBin, kernel string, cpus int, mem string, memBytes uint64, also []string) ([]*contender, error) {
	smolArgs := func(extraFlags ...string) func(string, string) []string {
		return func(initrd, extra string) []string {
			a := []string{"run", "--kernel", kernel, "--initrd", initrd, "--cpus", strconv.Itoa(cpus), "--mem", mem, "--boot-time"}
			a = append(a, extraFlags...)
			if extra != "" {
				a = append(a, "--cmdline", extra)
			}
			return a
		}
	}
	qemuArgs := func(devices []string) func(string, string) []string {
		return func(initrd, extra string) []string {
			cmdline := smol.DefaultCmdline
			if extra != "" {
				cmdline += " " + extra
			}
			a := []string{
				"-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", strconv.Itoa(cpus), "-m", strconv.FormatUint(memBytes>>20, 10),
				"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
				"-kernel", kernel, "-initrd", initrd, "-append", cmdline,
			}
			return append(a, devices...)
		}
	}
	cs := []*contender{
		{name: "smol", smol: true, bin: smolBin, args: smolArgs()},
		{name: "qemu-microvm", bin: qemuBin, args: qemuArgs(guestrun.QEMUDefaultDevices)},
	}
	if hasFlag(smolBin, noDefaultDevices) {
		cs = append(cs, &contender{name: "smol-bare", smol: true, bin: smolBin, args: smolArgs(noDefaultDevices)})
	} else {
		fmt.Printf("bench: %s has no %s: no smol-bare\n", smolBin, noDefaultDevices)
	}
	cs = append(cs, &contender{name: "qemu-microvm-bare", bin: qemuBin, args: qemuArgs(nil)})
	for _, a := range also {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("-also %q: want NAME=PATH", a)
		}
		cs = append(cs, &contender{name: name, smol: true, bin: path, args: smolArgs()})
	}
	return cs, nil
}

// hasFlag reports whether `bin run --help` mentions flag.
func hasFlag(bin, flag string) bool {
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	return strings.Contains(string(out), flag)
}

var (
	bootTimeLine  = regexp.MustCompile(`first KVM_RUN ([0-9.]+) ms`)
	userspaceLine = regexp.MustCompile(`userspace ([0-9.]+) ms`)
)

// binaryStart times the contender's binary from exec to exit doing nothing
// but start and print its usage: the cost of loading the program itself
// (in the box, its pages come over 9p), which smol's own --boot-time
// figures cannot see because they start in main.
func binaryStart(c *contender) (float64, error) {
	args := []string{"-version"}
	if c.smol {
		args = []string{"run", "--help"}
	}
	cmd := exec.Command(c.bin, args...)
	start := time.Now()
	if err := rounds.Command(c.name+" start", cmd, 30*time.Second, nil); err != nil {
		return 0, err
	}
	return float64(time.Since(start).Microseconds()) / 1000, nil
}

// boot starts one VMM and waits for the init's line and for the VMM to
// exit, at most timeout in all. console, if not nil, receives the console
// lines after the init's line (the diagnostic boots' dmesg).
func boot(c *contender, args []string, timeout time.Duration, console io.Writer) (sample, error) {
	cmd := exec.Command(c.bin, args...)
	// A pipe of our own rather than StdoutPipe: the console is read to its
	// end before the process is reaped.
	pr, pw, err := os.Pipe()
	if err != nil {
		return sample{}, err
	}
	defer pr.Close()
	var tail rounds.Tail
	var stderr strings.Builder
	cmd.Stdout = pw
	cmd.Stderr = io.MultiWriter(&stderr, &tail)
	start := time.Now()
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", c.name, err)
	}
	var s sample
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		ok := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case !ok && strings.Contains(line, marker):
				s.initMs = float64(time.Since(start).Microseconds()) / 1000
				if c.smol {
					s.mem = readProcMem(cmd.Process.Pid)
				}
				ok = true
			case ok && s.kernelMs == 0 && strings.Contains(line, "Run /init"):
				if m := logLine.FindStringSubmatch(strings.TrimRight(line, "\r")); m != nil {
					t, _ := strconv.ParseFloat(m[1], 64)
					s.kernelMs = t * 1000
				}
				if console != nil {
					fmt.Fprintln(console, line)
				}
			case ok && console != nil:
				fmt.Fprintln(console, line)
			case !ok:
				fmt.Fprintln(&tail, line)
			}
		}
		io.Copy(io.Discard, pr)
		found <- ok
	}()
	err = rounds.Wait(c.name, cmd, timeout, &tail)
	ok := <-found
	if g, isGuest := err.(*rounds.GuestError); isGuest {
		g.Tail = tail.String() // now with the console's last lines
	}
	if err != nil {
		return s, err
	}
	if !ok {
		return s, &rounds.GuestError{Who: c.name, Kind: rounds.Died, Tail: tail.String()}
	}
	if m := bootTimeLine.FindStringSubmatch(stderr.String()); m != nil {
		s.firstRunMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := userspaceLine.FindStringSubmatch(stderr.String()); m != nil {
		s.userMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if console != nil {
		fmt.Fprint(console, stderr.String())
	}
	return s, nil
}

// procMem is a VMM's memory (bench/internal/stats).
type procMem = stats.ProcMem

var readProcMem = stats.ReadProcMem

// memoryCost boots an 8 GiB guest twice, idle and after writing 100 MiB to
// a RAM-backed file, and reports the host memory (all of smol's resident
// memory, guest RAM included) at the end of each: memory is taken only as
// the guest touches it. A guest that fails is tried again, twice at most.
func memoryCost(smolBin, kernel, initPath string, timeout time.Duration) error {
	rss := map[string]float64{}
	for _, c := range []struct{ name, rc string }{
		{"idle", "echo " + marker + "\nsleep 1\npoweroff -f\n"},
		{"touched", "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>/dev/null\necho " + marker + "\nsleep 1\npoweroff -f\n"},
	} {
		initrd, err := guestrun.WriteInitramfs(initPath, c.rc)
		if err != nil {
			return err
		}
		cont := &contender{name: "smol 8 GiB " + c.name, smol: true, bin: smolBin}
		args := []string{"run", "--kernel", kernel, "--initrd", initrd, "--cpus", "1", "--mem", "8G"}
		var s sample
		for try := 1; try <= 3; try++ {
			if s, err = boot(cont, args, timeout, nil); err == nil {
				break
			}
			fmt.Printf("bench: %v\n", err)
		}
		os.Remove(initrd)
		if err != nil {
			return err
		}
		rss[c.name] = s.mem.RSS
	}
	fmt.Printf("8 GiB guest, host memory: idle %.0f MiB, after touching 100 MiB %.0f MiB (+%.0f MiB)\n",
		rss["idle"], rss["touched"], rss["touched"]-rss["idle"])
	return nil
}

// report prints each contender's medians, the ratios, and rows for
// BENCHMARKS.md.
func report(cs []*contender, res rounds.Result, want int, machine, commit string) {
	fmt.Println()
	// start: the binary's own start-up (exec to exit of a no-op run);
	// kernel: the guest kernel's clock when it ran /init; for smol,
	// KVM_RUN: its main to the first KVM_RUN and guest: first KVM_RUN to
	// the init's write of the boot timer (the guest's whole boot, the
	// part before the kernel's clock starts included).
	fmt.Println("start: exec to exit of `run --help` (QEMU: -version); kernel: the guest's clock at /init; KVM_RUN: smol's main to first KVM_RUN; guest: first KVM_RUN to the init's boot-timer write")
	fmt.Printf("%-20s %5s %10s %17s %10s %10s %10s %10s %22s %7s\n", "contender", "boots", "init med", "init min-max", "start", "kernel", "KVM_RUN", "guest", "VMM RSS (anon+file)", "threads")
	for _, c := range cs {
		if len(c.samples) == 0 {
			fmt.Printf("%-20s %5d\n", c.name, 0)
			continue
		}
		init := pick(c.samples, func(s sample) float64 { return s.initMs })
		line := fmt.Sprintf("%-20s %5d %7.0f ms %7.0f-%-6.0f ms %7.0f ms %7.0f ms", c.name, len(c.samples), median(init), slices.Min(init), slices.Max(init),
			median(pick(c.samples, func(s sample) float64 { return s.startMs })),
			median(pick(c.samples, func(s sample) float64 { return s.kernelMs })))
		if c.smol {
			m := c.medianMem()
			line += fmt.Sprintf(" %7.1f ms %7.0f ms %6.1f MiB (%.1f+%.1f) %7d",
				median(pick(c.samples, func(s sample) float64 { return s.firstRunMs })),
				median(pick(c.samples, func(s sample) float64 { return s.userMs - s.firstRunMs })),
				m.VMM(), m.Anon, m.File, m.Threads)
		}
		fmt.Println(line)
	}
	fmt.Printf("rounds: %s\n", res.Summary(want))
	for _, f := range res.Failures {
		fmt.Printf("failed round %d: %v\n", f.Round, f.Err)
	}

	by := map[string]*contender{}
	for _, c := range cs {
		by[c.name] = c
	}
	type pair struct{ a, b, what string }
	pairs := []pair{
		{"smol", "qemu-microvm", "smol / qemu-microvm (same devices)"},
		{"smol-bare", "qemu-microvm-bare", "smol-bare / qemu-microvm-bare"},
	}
	for _, c := range cs {
		if c.smol && c.name != "smol" && c.name != "smol-bare" {
			pairs = append(pairs, pair{c.name, "qemu-microvm", c.name + " / qemu-microvm (same devices)"},
				pair{"smol", c.name, "smol / " + c.name})
		}
	}
	fmt.Println()
	for _, p := range pairs {
		a, b := by[p.a], by[p.b]
		if a == nil || b == nil || len(a.samples) == 0 || len(b.samples) == 0 {
			continue
		}
		fmt.Printf("boot-to-init ratio %s: %.2f (per round: median %.2f)\n", p.what, a.initMedian()/b.initMedian(), pairedRatio(a, b))
	}

	// Rows for BENCHMARKS.md: one per smol build and device set, against
	// QEMU with the same devices.
	date := time.Now().UTC().Format("2006-01-02")
	fmt.Println()
	fmt.Println("BENCHMARKS.md rows:")
	fmt.Println("| date | machine | commit | devices | rounds | smol boot→init | QEMU microvm boot→init | ratio (target ≤ 0.5) | smol exec→first KVM_RUN | smol VMM RSS at init (anon + file) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	row := func(c, q *contender, rev, devices string) {
		if c == nil || q == nil || len(c.samples) == 0 || len(q.samples) == 0 {
			return
		}
		m := c.medianMem()
		fmt.Printf("| %s | %s | %s | %s | %d | %.0f ms | %.0f ms | **%.2f** | %.0f ms | %.1f MiB (%.1f + %.1f) |\n",
			date, machine, rev, devices, len(c.samples), c.initMedian(), q.initMedian(), c.initMedian()/q.initMedian(),
			median(pick(c.samples, func(s sample) float64 { return s.firstRunMs })), m.VMM(), m.Anon, m.File)
	}
	if commit == "" {
		commit = "?"
	}
	row(by["smol"], by["qemu-microvm"], commit, "entropy + balloon (smol's default; QEMU given the same)")
	row(by["smol-bare"], by["qemu-microvm-bare"], commit, "none (smol --no-default-devices; QEMU bare)")
	for _, c := range cs {
		if c.smol && c.name != "smol" && c.name != "smol-bare" {
			row(c, by["qemu-microvm"], c.name, "that build's defaults; QEMU with entropy + balloon")
		}
	}
}

func (c *contender) initMedian() float64 {
	return median(pick(c.samples, func(s sample) float64 { return s.initMs }))
}

func (c *contender) medianMem() procMem {
	return procMem{
		RSS:     median(pick(c.samples, func(s sample) float64 { return s.mem.RSS })),
		Anon:    median(pick(c.samples, func(s sample) float64 { return s.mem.Anon })),
		File:    median(pick(c.samples, func(s sample) float64 { return s.mem.File })),
		Shmem:   median(pick(c.samples, func(s sample) float64 { return s.mem.Shmem })),
		Threads: int(median(pick(c.samples, func(s sample) float64 { return float64(s.mem.Threads) }))),
	}
}

// pairedRatio is the median over rounds of a's time over b's in the same
// round: the two ran back to back, so drift in the box hits both alike.
func pairedRatio(a, b *contender) float64 {
	var r []float64
	for i := range min(len(a.samples), len(b.samples)) {
		r = append(r, a.samples[i].initMs/b.samples[i].initMs)
	}
	return median(r)
}

func pick(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// median is the figure quoted (bench/internal/stats).
var median = stats.Median

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

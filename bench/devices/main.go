package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
	"github.com/smolvm/smol/bench/internal/settle"
)

func main() {
	rounds := flag.Int("rounds", 3, "guest runs per VMM (alternating); each figure is the median")
	secs := flag.Float64("seconds", 3, "duration of each measurement inside the guest")
	qd := flag.Int("qd", 8, "random reads in flight")
	diskMiB := flag.Int("disk-mib", 256, "size of the raw disk image, in MiB")
	fsMiB := flag.Int("fs-mib", 1024, "size of the file written to and read from the shared directory, in MiB")
	walkFiles := flag.Int("fs-files", 10000, "empty files in the shared directory for the walk (the issue's figure is 10,000; fewer for a quick throughput comparison)")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel (vmlinux with a PVH note; QEMU needs one)")
	initPath := flag.String("init", "build/init", "guest init binary")
	nettool := flag.String("nettool", "build/nettool", "guest measurement tool")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	cpus := flag.Int("cpus", 1, "vCPUs")
	mem := flag.String("mem", "512M", "guest memory")
	extra := flag.String("cmdline", "", "kernel parameters appended for both VMMs (e.g. loglevel=7 to see a guest's crash)")
	only := flag.String("only", "", "run only this VMM (smol or qemu-microvm), to diagnose it; no ratios")
	settleMiB := flag.Int("settle-mib", 256, "before each guest, write and free this much tmpfs memory (0: don't; see package settle)")
	phaseList := flag.String("phases", strings.Join(phases, ","), "the measurements to run: "+strings.Join(phases, ", "))
	flag.Parse()
	run := map[string]bool{}
	for _, p := range strings.Split(*phaseList, ",") {
		if !slices.Contains(phases, p) {
			fatal(fmt.Errorf("-phases: %q is not one of %s", p, strings.Join(phases, ", ")))
		}
		run[p] = true
	}
	if *rounds < 1 || *diskMiB < 16 || *secs <= 0 {
		fatal(fmt.Errorf("need -rounds >= 1, -disk-mib >= 16 and -seconds > 0"))
	}
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		fatal(fmt.Errorf("-mem: %w", err))
	}

	env, err := setUp(*diskMiB, *walkFiles)
	if err != nil {
		fatal(err)
	}
	defer env.tearDown()

	rc := func(n network) string { return guestScript(n, *secs, *qd, *fsMiB, run) }
	vmms := []*vmm{
		smolVMM(*smolBin, *kernel, *extra, *cpus, *mem, env, smolNet),
		qemuVMM(*qemuBin, *kernel, *extra, *cpus, memBytes>>20, env, qemuNet),
	}
	for _, v := range vmms {
		if v.initrd, err = guestrun.Initramfs("smol-bench-devices", *initPath, *nettool, rc(v.net)); err != nil {
			env.tearDown()
			fatal(err)
		}
		env.files = append(env.files, v.initrd)
	}

	fmt.Printf("device bench: kernel %s, %d vCPU, %s, %d rounds, %s s per measurement, %d MiB raw image on %s, -settle-mib %d before each guest\n",
		*kernel, *cpus, *mem, *rounds, strconv.FormatFloat(*secs, 'f', -1, 64), *diskMiB, env.dir, *settleMiB)
	fmt.Println("peers: QEMU microvm virtio-mmio, given smol's default entropy and balloon (free page reporting) devices too; disk cache=writeback (tmpfs has no O_DIRECT), aio=threads;",
		"virtio-net vhost=off (userspace, like smol); vsock = vhost-vsock (IN-KERNEL, host AF_VSOCK sockets) against smol's userspace device (host Unix sockets)")

	if *only != "" {
		i := slices.IndexFunc(vmms, func(v *vmm) bool { return v.name == *only })
		if i < 0 {
			env.tearDown()
			fatal(fmt.Errorf("-only %q: want smol or qemu-microvm", *only))
		}
		vmms = vmms[i : i+1]
	}

	limit := guestTimeout(*secs, *fsMiB)
	want := 0 // the figures of the phases asked for (each is named phase-...)
	for _, f := range figures {
		if phase, _, _ := strings.Cut(f.Key, "-"); run[phase] {
			want++
		}
	}
	runs := map[string][]map[string]float64{} // per VMM, per round
	failures := map[string]int{}
	for r := 0; r < *rounds; r++ {
		order := vmms
		if r%2 == 1 { // alternate who goes first, so drift in the box evens out
			order = slices.Clone(vmms)
			slices.Reverse(order)
		}
		for _, v := range order {
			if err := settle.Memory(*settleMiB); err != nil {
				fatal(err)
			}
			got, err := v.run(limit, want)
			if err != nil {
				fmt.Printf("round %d %s FAILED: %v\n", r+1, v.name, err)
				failures[v.name]++
			}
			runs[v.name] = append(runs[v.name], got)
			fmt.Printf("round %d %-12s %s\n", r+1, v.name, guestrun.Describe(figures, got))
		}
	}
	if len(vmms) < 2 {
		if failures[vmms[0].name] > 0 {
			env.tearDown()
			os.Exit(1)
		}
		return
	}
	complete := report(runs[vmms[0].name], runs[vmms[1].name], run)
	fmt.Printf("failed guest runs: smol %d of %d, qemu-microvm %d of %d\n",
		failures[vmms[0].name], *rounds, failures[vmms[1].name], *rounds)
	if !complete || len(failures) > 0 {
		env.tearDown()
		os.Exit(1)
	}
}

// guestTimeout bounds one guest run: boot, the shared directory's file
// written and read (at a box's slowest, about 4 MB/s) and its walk, seven
// timed measurements and the waits between them.
func guestTimeout(secs float64, fsMiB int) time.Duration {
	return 3*time.Minute + time.Duration(7*3*secs*float64(time.Second)) + time.Duration(fsMiB/2)*time.Second
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

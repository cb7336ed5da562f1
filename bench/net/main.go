// Command bench-net compares smol's userspace network gateway (--net)
// with the userspace networks of QEMU microvm, passt (-netdev stream) and
// slirp (-netdev user), and with smol on a TAP for reference: the same
// guest kernel and measurements, every VMM in each round, in one box run.
// Each guest measures TCP throughput both ways against servers on the
// host and the rate of connection setups (connect, the server's close).
// It prints each figure's median and smol's ratio against each peer.
//
// Run it in the box as root: make bench-net.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
)

func main() {
	rounds := flag.Int("rounds", 3, "guest runs per VMM (each round runs every VMM, order rotating); figures are medians")
	secs := flag.Float64("seconds", 3, "duration of each measurement inside the guest")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel (vmlinux with a PVH note; QEMU needs one)")
	initPath := flag.String("init", "build/init", "guest init binary")
	nettool := flag.String("nettool", "build/nettool", "guest measurement tool")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	passtBin := flag.String("passt", "passt", "passt binary")
	cpus := flag.Int("cpus", 1, "vCPUs")
	mem := flag.String("mem", "512M", "guest memory")
	only := flag.String("only", "", "run only this VMM ("+vmmNames()+"), to diagnose it")
	flag.Parse()
	if *rounds < 1 || *secs <= 0 {
		fatal(fmt.Errorf("need -rounds >= 1 and -seconds > 0"))
	}
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		fatal(fmt.Errorf("-mem: %w", err))
	}
	env, err := setUp()
	if err != nil {
		fatal(err)
	}
	defer env.tearDown()

	b := bench{kernel: *kernel, cpus: *cpus, mem: *mem, memMiB: memBytes >> 20, smol: *smolBin, qemu: *qemuBin, passt: *passtBin, env: env}
	vmms := b.vmms()
	if *only != "" {
		i := slices.IndexFunc(vmms, func(v *vmm) bool { return v.name == *only })
		if i < 0 {
			env.tearDown()
			fatal(fmt.Errorf("-only %q: want one of %s", *only, vmmNames()))
		}
		vmms = vmms[i : i+1]
	}
	for _, v := range vmms {
		if v.initrd, err = guestrun.Initramfs("smol-bench-net", *initPath, *nettool, guestScript(v.guest, *secs)); err != nil {
			env.tearDown()
			fatal(err)
		}
		env.files = append(env.files, v.initrd)
	}
	fmt.Printf("net bench: kernel %s, %d vCPU, %s, %d rounds, %s s per measurement\n",
		*kernel, *cpus, *mem, *rounds, strconv.FormatFloat(*secs, 'f', -1, 64))
	fmt.Println("peers: QEMU microvm virtio-mmio, virtio-net vhost=off; passt " + passtVersion(*passtBin) + " over a Unix stream socket; slirp (-netdev user); smol on a TAP as the kernel-datapath reference")

	limit := 2*time.Minute + time.Duration(3*3*(*secs)*float64(time.Second))
	runs := map[string][]map[string]float64{}
	failures := 0
	for r := 0; r < *rounds; r++ {
		order := slices.Clone(vmms)
		// Rotate who goes first, so drift in the box evens out.
		order = append(order[r%len(order):], order[:r%len(order)]...)
		for _, v := range order {
			got, err := v.run(limit)
			if err != nil {
				fmt.Printf("round %d %s FAILED: %v\n", r+1, v.name, err)
				failures++
			}
			runs[v.name] = append(runs[v.name], got)
			fmt.Printf("round %d %-12s %s\n", r+1, v.name, guestrun.Describe(figures, got))
		}
	}
	report(vmms, runs)
	if failures > 0 {
		env.tearDown()
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

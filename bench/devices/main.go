package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/smolvm/smol"
)

func main() {
	rounds := flag.Int("rounds", 3, "guest runs per VMM (alternating); each figure is the median")
	secs := flag.Float64("seconds", 3, "duration of each measurement inside the guest")
	qd := flag.Int("qd", 8, "random reads in flight")
	diskMiB := flag.Int("disk-mib", 256, "size of the raw disk image, in MiB")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel (vmlinux with a PVH note; QEMU needs one)")
	initPath := flag.String("init", "build/init", "guest init binary")
	nettool := flag.String("nettool", "build/nettool", "guest measurement tool")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	cpus := flag.Int("cpus", 1, "vCPUs")
	mem := flag.String("mem", "512M", "guest memory")
	flag.Parse()
	if *rounds < 1 || *diskMiB < 16 || *secs <= 0 {
		fatal(fmt.Errorf("need -rounds >= 1, -disk-mib >= 16 and -seconds > 0"))
	}
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		fatal(fmt.Errorf("-mem: %w", err))
	}

	env, err := setUp(*diskMiB)
	if err != nil {
		fatal(err)
	}
	defer env.tearDown()

	rc := func(n network) string { return guestScript(n, *secs, *qd) }
	vmms := []*vmm{
		smolVMM(*smolBin, *kernel, *cpus, *mem, env, smolNet),
		qemuVMM(*qemuBin, *kernel, *cpus, memBytes>>20, env, qemuNet),
	}
	for _, v := range vmms {
		if v.initrd, err = writeInitramfs(*initPath, *nettool, rc(v.net)); err != nil {
			env.tearDown()
			fatal(err)
		}
		env.files = append(env.files, v.initrd)
	}

	fmt.Printf("device bench: kernel %s, %d vCPU, %s, %d rounds, %s s per measurement, %d MiB raw image on %s\n",
		*kernel, *cpus, *mem, *rounds, strconv.FormatFloat(*secs, 'f', -1, 64), *diskMiB, env.dir)
	fmt.Println("peers: QEMU microvm virtio-mmio; disk cache=writeback (tmpfs has no O_DIRECT), aio=threads;",
		"virtio-net vhost=off (userspace, like smol); vsock = vhost-vsock (IN-KERNEL, host AF_VSOCK sockets) against smol's userspace device (host Unix sockets)")

	limit := guestTimeout(*secs)
	results := map[string]map[string][]float64{}
	failed := false
	for r := 0; r < *rounds; r++ {
		order := vmms
		if r%2 == 1 { // alternate who goes first, so drift in the box evens out
			order = []*vmm{vmms[1], vmms[0]}
		}
		for _, v := range order {
			got, err := v.run(limit)
			if err != nil {
				fmt.Printf("round %d %s: %v\n", r+1, v.name, err)
				failed = true
			}
			if results[v.name] == nil {
				results[v.name] = map[string][]float64{}
			}
			for k, x := range got {
				results[v.name][k] = append(results[v.name][k], x)
			}
			fmt.Printf("round %d %-12s %s\n", r+1, v.name, describeRun(got))
		}
	}
	if !report(results[vmms[0].name], results[vmms[1].name]) || failed {
		env.tearDown()
		os.Exit(1)
	}
}

// guestTimeout bounds one guest run: boot, seven measurements and the
// waits between them, with room for a slow box.
func guestTimeout(secs float64) time.Duration {
	return 2*time.Minute + time.Duration(7*3*secs*float64(time.Second))
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

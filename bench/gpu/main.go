// Command bench-gpu measures the display's full-screen update rate in the
// box: a guest with a WIDTHxHEIGHT display marks its whole framebuffer
// dirty over and over (nettool fb-rate: DRM DIRTYFB, which Linux's
// virtio-gpu driver turns into a full-screen TRANSFER_TO_HOST_2D and a
// RESOURCE_FLUSH, waiting for both), under smol and under QEMU microvm
// with its virtio-gpu-device of the same size, alternating, and prints
// the medians and their ratio. The same kernel, initramfs and vCPU count
// for both; a guest that fails a round is counted and the round run
// again.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
	"github.com/smolvm/smol/bench/internal/stats"
)

const upMarker = "smol-bench-gpu-guest-up"

func main() {
	rounds := flag.Int("rounds", 3, "guest runs per VMM (alternating); the figure is the median")
	secs := flag.Float64("seconds", 5, "how long the guest updates the screen")
	size := flag.String("size", "1280x800", "display size")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel")
	initPath := flag.String("init", "build/init", "guest init binary")
	nettool := flag.String("nettool", "build/nettool", "guest measurement tool")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	flag.Parse()
	w, h, ok := strings.Cut(*size, "x")
	if !ok || *rounds < 1 || *secs <= 0 {
		fatal(fmt.Errorf("need -size WxH, -rounds >= 1, -seconds > 0"))
	}
	rc := fmt.Sprintf("echo %s\nnettool fb-rate %s\npoweroff -f\n", upMarker, strconv.FormatFloat(*secs, 'f', -1, 64))
	initrd, err := guestrun.Initramfs("smol-bench-gpu", *initPath, *nettool, rc)
	if err != nil {
		fatal(err)
	}
	defer os.Remove(initrd)
	vmms := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"smol", func() *exec.Cmd {
			return exec.Command(*smolBin, "run", "--kernel", *kernel, "--initrd", initrd, "--cpus", "1", "--mem", "512M",
				"--gpu", "--gpu-size", *size)
		}},
		{"qemu-microvm", func() *exec.Cmd {
			return exec.Command(*qemuBin, "-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", "1", "-m", "512",
				"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
				"-kernel", *kernel, "-initrd", initrd, "-append", smol.DefaultCmdline,
				// virtio-gpu is a virtio 1.0 device: QEMU's virtio-mmio must
				// not be legacy (its default), or Linux leaves it alone.
				"-global", "virtio-mmio.force-legacy=false",
				"-device", "virtio-gpu-device,xres="+w+",yres="+h)
		}},
	}
	fmt.Printf("display bench: %s, kernel %s, 1 vCPU, %d rounds of %s s; peer: QEMU microvm virtio-gpu-device (-display none)\n",
		*size, *kernel, *rounds, strconv.FormatFloat(*secs, 'f', -1, 64))
	rates := map[string][]float64{}
	failures := map[string]int{}
	limit := 3*time.Minute + time.Duration(*secs*float64(time.Second))
	for r := 0; r < *rounds; r++ {
		for i := range vmms {
			v := vmms[(i+r)%len(vmms)] // alternate who goes first
			for attempt := 0; ; attempt++ {
				got, err := guestrun.Run(v.cmd(), guestrun.Options{Marker: upMarker, Want: 1, Limit: limit, BootLimit: 90 * time.Second})
				if err == nil {
					rates[v.name] = append(rates[v.name], got["fb-updates"])
					fmt.Printf("round %d %-12s %.1f full-screen updates/s\n", r+1, v.name, got["fb-updates"])
					break
				}
				failures[v.name]++
				fmt.Printf("round %d %s FAILED (run again): %v\n", r+1, v.name, err)
				if attempt == 2 {
					fatal(fmt.Errorf("%s failed 3 times in a row", v.name))
				}
			}
		}
	}
	s, q := stats.Median(rates["smol"]), stats.Median(rates["qemu-microvm"])
	fmt.Printf("full-screen %s updates/s: smol %.1f, qemu-microvm %.1f, ratio %.2f (target: smol >= 60/s)\n", *size, s, q, s/q)
	fmt.Printf("failed guest runs (replaced): smol %d, qemu-microvm %d\n", failures["smol"], failures["qemu-microvm"])
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

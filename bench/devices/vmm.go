package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/smolvm/smol"
)

// vmm is one of the two VMMs under comparison and how to start it with the
// benchmark's devices.
type vmm struct {
	name   string
	bin    string
	args   func(initrd string) []string
	net    network
	initrd string
}

func smolVMM(bin, kernel, cmdline string, cpus int, mem string, env *environment, n network) *vmm {
	return &vmm{name: "smol", bin: bin, net: n, args: func(initrd string) []string {
		return []string{"run", "--kernel", kernel, "--initrd", initrd, "--cpus", strconv.Itoa(cpus), "--mem", mem,
			"--disk", env.disk, "--net-tap", n.tap, "--vsock", env.vsockPath, "--cid", strconv.Itoa(guestCID), "--cmdline", cmdline}
	}}
}

func qemuVMM(bin, kernel, cmdline string, cpus int, memMiB uint64, env *environment, n network) *vmm {
	return &vmm{name: "qemu-microvm", bin: bin, net: n, args: func(initrd string) []string {
		return []string{
			"-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", strconv.Itoa(cpus), "-m", strconv.FormatUint(memMiB, 10),
			"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
			"-kernel", kernel, "-initrd", initrd, "-append", strings.TrimSpace(smol.DefaultCmdline + " " + cmdline),
			"-drive", "id=d0,file=" + env.disk + ",format=raw,if=none,cache=writeback,aio=threads",
			"-device", "virtio-blk-device,drive=d0",
			"-netdev", "tap,id=n0,ifname=" + n.tap + ",script=no,downscript=no,vhost=off",
			"-device", "virtio-net-device,netdev=n0",
			"-device", "vhost-vsock-device,guest-cid=" + strconv.Itoa(guestCID),
		}
	}}
}

// bootLimit bounds the boot to the guest's rc, in the box; it takes a few
// seconds when all is well.
const bootLimit = 90 * time.Second

// consoleTail is how many of a failed run's last console lines are shown.
const consoleTail = 40

var resultLine = regexp.MustCompile(`nettool-result (\S+) ([0-9.]+) `)

// run boots the guest once and returns the measurements it printed. A run
// that misses some returns those it has and an error with the guest's
// complaints (its "nettool:" lines) and the end of its console.
func (v *vmm) run(limit time.Duration) (map[string]float64, error) {
	cmd := exec.Command(v.bin, v.args(v.initrd)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", v.bin, err)
	}
	// A guest that never reaches its rc is killed early; one that hangs
	// in a measurement, at limit.
	var up atomic.Bool
	var killed atomic.Value
	kill := func(why string) {
		killed.CompareAndSwap(nil, why)
		cmd.Process.Kill()
	}
	timer := time.AfterFunc(limit, func() { kill(fmt.Sprintf("killed after %v", limit)) })
	defer timer.Stop()
	bootTimer := time.AfterFunc(bootLimit, func() {
		if !up.Load() {
			kill(fmt.Sprintf("killed: no %q on the console after %v", guestUpMarker, bootLimit))
		}
	})
	defer bootTimer.Stop()
	got := map[string]float64{}
	var complaints, tail []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.Contains(line, guestUpMarker) {
			up.Store(true)
		}
		if m := resultLine.FindStringSubmatch(line); m != nil {
			if x, err := strconv.ParseFloat(m[2], 64); err == nil {
				got[m[1]] = x
			}
		} else if strings.Contains(line, "nettool:") {
			complaints = append(complaints, line)
		}
		if tail = append(tail, line); len(tail) > consoleTail {
			tail = tail[1:]
		}
	}
	// A line too long for the scanner ends the loop: keep draining, so the
	// VMM never blocks on a full console pipe.
	io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	if len(got) == len(figures) {
		return got, nil
	}
	if why, ok := killed.Load().(string); ok {
		werr = errors.New(why)
	}
	// The guest's own complaints, then how its console ended (a kernel
	// oops, a hang in some step).
	detail := append(complaints, "...")
	detail = append(detail, tail...)
	return got, fmt.Errorf("%d of %d measurements (exit: %v); stderr: %s; console:\n  %s",
		len(got), len(figures), werr, strings.TrimSpace(stderr.String()), strings.Join(detail, "\n  "))
}

package main

import (
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
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
			"--disk", env.disk, "-v", env.share + ":/mnt/share", "--net-tap", n.tap, "--vsock", env.vsockPath, "--cid", strconv.Itoa(guestCID), "--cmdline", cmdline}
	}}
}

func qemuVMM(bin, kernel, cmdline string, cpus int, memMiB uint64, env *environment, n network) *vmm {
	return &vmm{name: "qemu-microvm", bin: bin, net: n, args: func(initrd string) []string {
		return append([]string{
			"-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", strconv.Itoa(cpus), "-m", strconv.FormatUint(memMiB, 10),
			"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
			"-kernel", kernel, "-initrd", initrd, "-append", strings.TrimSpace(smol.DefaultCmdline + " " + cmdline),
			"-drive", "id=d0,file=" + env.disk + ",format=raw,if=none,cache=writeback,aio=threads",
			"-device", "virtio-blk-device,drive=d0",
			"-fsdev", "local,id=f0,path=" + env.share + ",security_model=none",
			"-device", "virtio-9p-device,fsdev=f0,mount_tag=" + shareTag,
			"-netdev", "tap,id=n0,ifname=" + n.tap + ",script=no,downscript=no,vhost=off",
			"-device", "virtio-net-device,netdev=n0",
			"-device", "vhost-vsock-device,guest-cid=" + strconv.Itoa(guestCID),
		}, guestrun.QEMUDefaultDevices...)
	}}
}

// bootLimit bounds the boot to the guest's rc, in the box; it takes a few
// seconds when all is well.
const bootLimit = 90 * time.Second

// run boots the guest once and returns the want measurements it printed.
func (v *vmm) run(limit time.Duration, want int) (map[string]float64, error) {
	return guestrun.Run(exec.Command(v.bin, v.args(v.initrd)...),
		guestrun.Options{Marker: guestUpMarker, Want: want, Limit: limit, BootLimit: bootLimit})
}

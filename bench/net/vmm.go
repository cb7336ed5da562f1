package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/guestrun"
)

// vmm is one network under comparison: how to start its VMM (and helper)
// and how its guest configures itself.
type vmm struct {
	name   string
	guest  guestNet
	start  func(initrd string) (cmd *exec.Cmd, cleanup func(), err error)
	initrd string
}

// bench holds what every VMM's command line needs.
type bench struct {
	kernel            string
	cpus              int
	mem               string
	memMiB            uint64
	smol, qemu, passt string
	env               *environment
}

func vmmNames() string { return "smol-gateway, qemu-passt, qemu-slirp, smol-tap" }

// bootLimit bounds the boot to the guest's rc, in the box.
const bootLimit = 90 * time.Second

func (b *bench) vmms() []*vmm {
	return []*vmm{
		{
			// The gateway's guest side is what smol's agent configures
			// (smol.net=); the host's servers are on the dummy
			// interface, which --allow-cidr opens past the floor.
			name:  "smol-gateway",
			guest: guestNet{cidr: "10.0.2.15/24", gateway: "10.0.2.2", host: dummyIP},
			start: func(initrd string) (*exec.Cmd, func(), error) {
				return exec.Command(b.smol, b.smolArgs(initrd, "--net", "--allow-cidr", dummyIP)...), func() {}, nil
			},
		},
		{
			// passt gives its guest the host's address and maps the
			// gateway's to the host's loopback; MTU 65520 as passt
			// advertises over DHCP.
			name:  "qemu-passt",
			guest: guestNet{cidr: dummyIP + "/24", gateway: dummyGW, host: dummyGW, mtu: 65520},
			start: b.startPasst,
		},
		{
			name:  "qemu-slirp",
			guest: guestNet{cidr: "10.0.2.15/24", gateway: "10.0.2.2", host: "10.0.2.2"},
			start: func(initrd string) (*exec.Cmd, func(), error) {
				return exec.Command(b.qemu, b.qemuArgs(initrd, "user,id=n0")...), func() {}, nil
			},
		},
		{
			name:  "smol-tap",
			guest: guestNet{cidr: tapGuest + "/24", host: tapHostIP},
			start: func(initrd string) (*exec.Cmd, func(), error) {
				if err := b.env.addTAP(); err != nil {
					return nil, nil, err
				}
				return exec.Command(b.smol, b.smolArgs(initrd, "--net-tap", tapName)...), func() {}, nil
			},
		},
	}
}

func (b *bench) smolArgs(initrd string, net ...string) []string {
	return append([]string{"run", "--kernel", b.kernel, "--initrd", initrd, "--cpus", strconv.Itoa(b.cpus), "--mem", b.mem}, net...)
}

func (b *bench) qemuArgs(initrd, netdev string) []string {
	return []string{
		"-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", strconv.Itoa(b.cpus), "-m", strconv.FormatUint(b.memMiB, 10),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-kernel", b.kernel, "-initrd", initrd, "-append", smol.DefaultCmdline,
		"-netdev", netdev, "-device", "virtio-net-device,netdev=n0",
	}
}

// startPasst starts a passt for one guest (it serves one client and
// exits) and the QEMU that connects to it.
func (b *bench) startPasst(initrd string) (*exec.Cmd, func(), error) {
	// passt drops to user nobody before it binds its socket: give it a
	// directory it may write, under one it may pass through.
	os.Chmod(b.env.dir, 0o711)
	dir := filepath.Join(b.env.dir, "passt")
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o777); err != nil {
		return nil, nil, err
	}
	os.Chmod(dir, 0o1777)
	sock := filepath.Join(dir, "passt.sock")
	// passt sandboxes itself in a user namespace, which the kernel refuses
	// to a chrooted process: in the test box, whose init chroots into the
	// host's root from an initramfs, passt cannot start (it says
	// "Couldn't create user namespace") and this peer fails.
	p := exec.Command(b.passt, "--foreground", "--one-off", "--quiet", "--socket", sock, "-t", "none", "-u", "none")
	var perr strings.Builder
	p.Stderr = &perr
	if err := p.Start(); err != nil {
		return nil, nil, fmt.Errorf("start passt: %w", err)
	}
	cleanup := func() {
		p.Process.Kill()
		p.Wait()
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i == 600 {
			cleanup()
			return nil, nil, fmt.Errorf("passt made no socket in 30 s: %s", perr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	netdev := "stream,id=n0,server=off,addr.type=unix,addr.path=" + sock
	return exec.Command(b.qemu, b.qemuArgs(initrd, netdev)...), cleanup, nil
}

// run boots the guest once and returns its measurements.
func (v *vmm) run(limit time.Duration) (map[string]float64, error) {
	cmd, cleanup, err := v.start(v.initrd)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return guestrun.Run(cmd, guestrun.Options{Marker: guestUpMarker, Want: len(figures), Limit: limit, BootLimit: bootLimit})
}

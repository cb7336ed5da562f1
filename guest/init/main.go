// Command init is the PID 1 of smol's small test and demo guests (an
// initramfs with busybox). It mounts the kernel filesystems, tells the VMM
// that userspace has been reached by writing the boot timer port, runs
// /etc/rc (or an interactive shell on the console when there is none), and
// powers the machine off when that ends, reaping orphans meanwhile.
//
// It is deliberately small; the image agent that runs OCI workloads is a
// separate, larger program.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/smolvm/smol/guest/pid1"
)

func main() {
	if err := pid1.MountAll("", pid1.KernelMounts); err != nil {
		fmt.Fprintf(os.Stderr, "init: %v\n", err)
	}
	if err := pid1.MarkUserspace(); err != nil {
		fmt.Fprintf(os.Stderr, "init: %v\n", err)
	}
	if err := pid1.LightDisplay(); err != nil {
		fmt.Fprintf(os.Stderr, "init: %v\n", err)
	}

	args := []string{"/bin/sh"}
	if _, err := os.Stat("/etc/rc"); err == nil {
		args = append(args, "/etc/rc")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/root", "TERM=linux"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	exited, _, err := pid1.NewReaper().Start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			// Without a controlling terminal (no console): run without one.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				return 0, err
			}
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "init: %v\n", err)
		pid1.PowerOff()
	}
	<-exited // orphans are reaped meanwhile
	pid1.PowerOff()
}

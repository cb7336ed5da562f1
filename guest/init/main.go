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

	"golang.org/x/sys/unix"
)

// The boot timer port and the value written to it; they must match
// devices/boottimer.
const (
	bootTimerPort  = 0x440
	bootTimerMagic = 123
)

func main() {
	for _, m := range []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, ""); err != nil && err != unix.EBUSY {
			fmt.Fprintf(os.Stderr, "init: mount %s: %v\n", m.dst, err)
		}
	}
	markUserspace()

	args := []string{"/bin/sh"}
	if _, err := os.Stat("/etc/rc"); err == nil {
		args = append(args, "/etc/rc")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/root", "TERM=linux"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		// Without a controlling terminal (no console): run without one.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err = cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "init: %v\n", err)
			poweroff()
		}
	}
	reapUntil(cmd.Process.Pid)
	poweroff()
}

// markUserspace writes the boot timer port. A failure only costs the
// measurement: other VMMs have no such port and ignore the write.
func markUserspace() {
	if err := unix.Ioperm(bootTimerPort, 1, 1); err != nil {
		fmt.Fprintf(os.Stderr, "init: ioperm: %v\n", err)
		return
	}
	outb(bootTimerPort, bootTimerMagic)
}

// reapUntil reaps every child (PID 1 inherits orphans) until pid exits.
func reapUntil(pid int) {
	for {
		var status unix.WaitStatus
		got, err := unix.Wait4(-1, &status, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || got == pid {
			return
		}
	}
}

func poweroff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // PID 1 must not exit
}

// outb writes one byte to an I/O port (outb_amd64.s).
func outb(port uint16, value uint8)

// Package pid1 is what every smol guest's first process does: mount the
// kernel's filesystems, tell the VMM that userspace has been reached, set
// the display's mode, reap orphaned processes and power the machine off.
// Both guest programs (the test init and the image agent) use it.
package pid1

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// The boot timer port and the value written to it; they must match
// devices/boottimer.
const (
	bootTimerPort  = 0x440
	bootTimerMagic = 123
)

// Mount is one filesystem to mount.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
}

// KernelMounts are /proc, /sys and /dev, which every Linux userland needs.
var KernelMounts = []Mount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
}

// MountAll mounts each entry under root (creating the target directory),
// treating "already mounted" as success.
func MountAll(root string, mounts []Mount) error {
	for _, m := range mounts {
		target := root + m.Target
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", target, err)
		}
		if err := unix.Mount(m.Source, target, m.FSType, m.Flags, m.Data); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s on %s: %w", m.FSType, target, err)
		}
	}
	return nil
}

// MarkUserspace writes the boot timer port. A failure only costs the
// measurement: other VMMs have no such port and ignore the write.
//
// ioperm grants the port to the calling OS thread only, so the goroutine
// stays on its thread from the grant to the write: moved to another
// thread in between, the out instruction faults and PID 1 dies of
// SIGSEGV (seen in about one guest boot in ten in the box).
func MarkUserspace() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Ioperm(bootTimerPort, 1, 1); err != nil {
		return fmt.Errorf("ioperm: %w", err)
	}
	outb(bootTimerPort, bootTimerMagic)
	return nil
}

// PowerOff syncs the filesystems and powers the machine off. PID 1 must
// never exit (the kernel would panic), so this never returns.
func PowerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

// outb writes one byte to an I/O port (outb_amd64.s).
func outb(port uint16, value uint8)

// Reaper collects every exited child of PID 1, its own and the orphans it
// inherits, and hands the statuses of the ones it was asked about to their
// waiters. Starting a child and registering it happen under the Reaper's
// lock (Start), so a child that exits at once is never reaped unclaimed.
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
}

// NewReaper starts reaping on SIGCHLD.
func NewReaper() *Reaper {
	r := &Reaper{waiters: map[int]chan unix.WaitStatus{}}
	go r.loop()
	return r
}

// Start runs start (which must start exactly one child and return its pid)
// and returns a channel that receives the child's status.
func (r *Reaper) Start(start func() (int, error)) (<-chan unix.WaitStatus, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, 0, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = ch
	return ch, pid, nil
}

func (r *Reaper) loop() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	for {
		r.reapAll()
		<-sigs
	}
}

func (r *Reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var status unix.WaitStatus
		pid, err := unix.Wait4(-1, &status, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			ch <- status
			delete(r.waiters, pid)
		}
	}
}

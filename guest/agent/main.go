// Command agent is PID 1 of guests that run OCI images and commands. It
// mounts the kernel filesystems, switches into the image's root filesystem
// (a read-only ext4 disk under a tmpfs overlay, so each run writes only to
// its own memory), connects to the host over vsock, runs the command it is
// sent with its streams relayed over that connection, and powers the
// machine off when the command ends. It also serves further commands on
// vsock port agent.ExecPort.
//
// Kernel command line: smol.root=DEVICE names the root disk; without it the
// command runs in the initramfs itself (the busybox default root).
// smol.upper=DEVICE names an ext4 disk that holds the root's writable
// layer (a persistent machine's); without it writes go to memory.
// smol.net=ADDRESS/PREFIX,GATEWAY configures the network interface for
// smol's userspace gateway (net.go). smol.shares=TAG:PATH[:ro],... mounts
// the host's shared directories (virtio-9p) at their paths (shares.go).
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/guest/pid1"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 0 && os.Args[0] == launcherName {
		runLauncher(os.Args[1:]) // a command's launcher (launch.go), not PID 1
	}
	if err := pid1.MountAll("", pid1.KernelMounts); err != nil {
		fatal(err)
	}
	pid1.MarkUserspace() // only a measurement
	if dev := cmdlineValue("smol.root"); dev != "" {
		if err := switchRoot(dev, cmdlineValue("smol.upper")); err != nil {
			fatal(err)
		}
	}
	if err := pid1.MountAll("", runtimeMounts); err != nil {
		fatal(err)
	}
	if err := mountShares(cmdlineValue("smol.shares")); err != nil {
		fatal(err) // a command must not run without the directories it was given
	}
	linkDevices()
	if err := pid1.LightDisplay(); err != nil {
		logf("%v", err) // the command runs; the screen stays dark
	}
	if err := configureNetwork(); err != nil {
		logf("network: %v", err) // the command runs, without the network
	}
	reaper := pid1.NewReaper()

	// Listen before telling the host we are up: once the boot command
	// runs, the host may send more.
	exec, err := listenVsock(agent.ExecPort)
	if err != nil {
		logf("exec port: %v", err)
	} else {
		go serveExec(exec, reaper)
	}
	conn, err := dialHost(agent.BootPort, 10*time.Second)
	if err != nil {
		fatal(err)
	}
	s := &session{conn: conn, reaper: reaper}
	start := s.serve()
	if start.PowerOff {
		pid1.PowerOff()
	}
	select {} // the host powers off or sends more commands
}

// serveExec runs each command that arrives on agent.ExecPort.
func serveExec(l *vsockListener, reaper *pid1.Reaper) {
	pause := 10 * time.Millisecond
	for {
		conn, err := l.accept()
		if err != nil && acceptCanRecover(err) {
			// A connection the host gave up before it was accepted,
			// or descriptors or memory short for a moment: the port
			// must stay open, or no command reaches this guest again.
			logf("exec port: %v (accepting again in %v)", err, pause)
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
			continue
		}
		if err != nil {
			logf("exec port: %v", err)
			return
		}
		pause = 10 * time.Millisecond
		go func() {
			s := &session{conn: conn, reaper: reaper}
			if s.serve().PowerOff {
				pid1.PowerOff()
			}
		}()
	}
}

// acceptCanRecover tells an accept error that concerns one connection or
// a passing shortage from one that ends the listening socket.
func acceptCanRecover(err error) bool {
	switch err {
	case unix.ECONNABORTED, unix.EPROTO, unix.ECONNRESET, unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.EAGAIN:
		return true
	}
	return false
}

// cmdlineValue returns the value of key=value on the kernel command line.
func cmdlineValue(key string) string {
	data, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return ""
	}
	for _, field := range strings.Fields(string(data)) {
		if k, v, ok := strings.Cut(field, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// logf writes to the kernel console, which the host shows when a run fails.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "smol-agent: "+format+"\n", args...)
}

// fatal reports a failure the guest cannot recover from and powers off;
// the host sees the VM end without an exit status and shows the console.
func fatal(err error) {
	logf("%v", err)
	pid1.PowerOff()
}

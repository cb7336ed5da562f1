package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/internal/syncbuf"
)

func TestTCPOverTAPBothWays(t *testing.T) {
	kernel := artifact(t, "build/vmlinux", "kernel")
	const tapName, hostIP, guestIP = "smoltest0", "10.213.0.1", "10.213.0.2"
	// A TCP echo server on the host end of the TAP: the guest's 100 MiB go
	// out and come back, checked by the guest.
	initrd := guestInitramfs(t, `ip addr add `+guestIP+`/24 dev eth0
ip link set eth0 up
echo guest-net-up
read go
nettool tcp-echo `+hostIP+`:7000 104857600 1
nettool tcp-echo `+hostIP+`:7000 1048576 8
poweroff -f
`, "build/nettool")
	retryIfGuestDies(t, func() error {
		in, typer := io.Pipe()
		out := &syncbuf.Buffer{}
		m, err := smol.Start(smol.Config{Kernel: kernel, Initrd: initrd, CPUs: 2, Memory: 512 << 20,
			Console: out, ConsoleInput: in, Net: &smol.Net{TAP: tapName}})
		if err != nil {
			return err
		}
		defer m.Close()
		if out, err := exec.Command("ip", "addr", "replace", hostIP+"/24", "dev", tapName).CombinedOutput(); err != nil {
			m.Stop()
			return fmt.Errorf("configure %s: %v: %s", tapName, err, out)
		}
		l, err := net.Listen("tcp", hostIP+":7000")
		if err != nil {
			m.Stop()
			return err
		}
		defer l.Close()
		serveEcho(l)
		if !out.WaitFor("guest-net-up", time.Now().Add(bootTimeout)) {
			m.Stop()
			return &guestDied{fmt.Sprintf("guest network not up; console:\n%s", out.String())}
		}
		io.WriteString(typer, "go\n")
		defer watchGuest(m, out, 3*time.Minute)()
		if err := waitPoweroff(m, out); err != nil {
			return err
		}
		console := out.String()
		for _, want := range []string{"echo-ok 1 connections x 104857600 bytes", "echo-ok 8 connections x 1048576 bytes"} {
			if !strings.Contains(console, want) {
				return fmt.Errorf("want %q; console:\n%s", want, console)
			}
		}
		return nil
	})
}

// rssMiB reads a process's resident memory.
func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func TestFreedGuestMemoryReturnsToHost(t *testing.T) {
	artifact(t, "build/vmlinux", "kernel")
	initrd := guestInitramfs(t, `dd if=/dev/zero of=/tmp/fill bs=1M count=512 2>/dev/null
echo guest-filled
read go
rm /tmp/fill
echo guest-freed
read done
poweroff -f
`)
	smolBin := artifact(t, "bin/smol", "build")
	retryIfGuestDies(t, func() error {
		// Bounds the whole run, so that a guest hung after freeing ends
		// here too: a normal run takes well under a minute.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, smolBin, "run", "--initrd", initrd, "--cpus", "2", "--mem", "1G")
		cmd.WaitDelay = commandWaitDelay
		out := &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		typer, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		defer cmd.Process.Kill()
		deadline := time.Now().Add(bootTimeout)
		if !out.WaitFor("guest-filled", deadline) {
			return &guestDied{fmt.Sprintf("guest did not fill its memory; console:\n%s", out.String())}
		}
		filled := rssMiB(cmd.Process.Pid)
		io.WriteString(typer, "go\n")
		if !out.WaitFor("guest-freed", deadline) {
			return &guestDied{fmt.Sprintf("guest did not free its memory; console:\n%s", out.String())}
		}
		// Free page reporting runs a couple of seconds after pages are freed.
		var now float64
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			if now = rssMiB(cmd.Process.Pid); filled-now >= 400 {
				break
			}
		}
		io.WriteString(typer, "done\n")
		// A guest that cannot power off any more was hung, which explains
		// memory that never came back (free page reporting runs in it).
		if err := cmd.Wait(); err != nil {
			return &guestDied{fmt.Sprintf("after freeing, smol did not power off (%v, %v); RSS %.0f MiB -> %.0f MiB; console:\n%s", err, ctx.Err(), filled, now, out.String())}
		}
		t.Logf("smol RSS: %.0f MiB with 512 MiB filled, %.0f MiB after the guest freed it", filled, now)
		if filled < 512 || filled-now < 400 {
			return fmt.Errorf("RSS %.0f MiB -> %.0f MiB: want a drop of at least 400 MiB; console:\n%s", filled, now, out.String())
		}
		return nil
	})
}

package main

import (
	"io"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startReaped starts args in a session of its own (as the agent starts
// commands) and returns it and a channel of its wait status, read the way
// the guest's reaper reads it: wait4 on the pid, not Go's Wait.
func startReaped(t *testing.T, args ...string) (*exec.Cmd, <-chan unix.WaitStatus) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	status := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		unix.Wait4(cmd.Process.Pid, &ws, 0, nil)
		status <- ws
	}()
	return cmd, status
}

func waitSignaled(t *testing.T, status <-chan unix.WaitStatus, sig syscall.Signal) {
	t.Helper()
	select {
	case ws := <-status:
		if !ws.Signaled() || ws.Signal() != sig {
			t.Fatalf("wait status %v, want killed by %v", ws, sig)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the command outlived %v", sig)
	}
}

// TestSignalReachesTheCommandUntilReaped: a signal frame reaches the
// command, or with a terminal its whole process group (a shell's child
// too); once the command is reaped, a late frame reaches nothing and
// does not fail.
func TestSignalReachesTheCommandUntilReaped(t *testing.T) {
	cmd, status := startReaped(t, "sleep", "100")
	signal(cmd.Process, cmd.Process.Pid, syscall.SIGTERM, false)
	waitSignaled(t, status, syscall.SIGTERM)
	signal(cmd.Process, cmd.Process.Pid, syscall.SIGKILL, false) // reaped: nothing to reach
	signal(cmd.Process, cmd.Process.Pid, syscall.SIGKILL, true)
	pid := cmd.Process.Pid
	cmd.Process.Release()
	signal(cmd.Process, pid, syscall.SIGKILL, true) // released: nothing, not kill(-1)

	// The group: sh's child holds the output pipe; it ends at once only
	// when the child got the signal too, not just sh.
	group := exec.Command("sh", "-c", "sleep 100; echo not reached")
	group.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := group.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := group.Start(); err != nil {
		t.Fatal(err)
	}
	defer group.Wait()
	time.Sleep(200 * time.Millisecond) // sh has started its child
	signal(group.Process, group.Process.Pid, syscall.SIGKILL, true)
	ended := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(out); ended <- b }()
	select {
	case b := <-ended:
		if len(b) != 0 {
			t.Errorf("the group printed %q", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the signal reached sh, not its child: the output stayed open")
	}
}

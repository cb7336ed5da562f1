package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nsPIDs returns the NSpid line of a process: its pid in each PID
// namespace from the outermost in.
func nsPIDs(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("process %d has no NSpid", pid)
	return nil
}

func nsOf(t *testing.T, pid int) string {
	t.Helper()
	link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	return link
}

// TestPIDNamespaceStartJoinEnd: a join that comes before the namespace's
// start waits for it and lands in it (pid 2 or more there, not 1, and the
// same namespace as its PID 1); once PID 1 ended, the name is free and a
// join says the namespace ended; a second start of a running name is
// refused.
func TestPIDNamespaceStartJoinEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("PID namespaces need root, as the guest agent has")
	}
	const name = "test-container"
	type joined struct {
		cmd *exec.Cmd
		err error
	}
	joins := make(chan joined, 1)
	go func() { // before the start: it must wait
		fd, err := joinPIDNamespace(name)
		if err != nil {
			joins <- joined{err: err}
			return
		}
		defer unix.Close(fd)
		cmd := exec.Command("sleep", "60")
		err = inPIDNamespace(fd, cmd.Start)
		joins <- joined{cmd, err}
	}()
	time.Sleep(100 * time.Millisecond)

	ns, err := claimPIDNamespace(name)
	if err != nil {
		t.Fatal(err)
	}
	init := exec.Command("sleep", "60")
	init.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}
	err = init.Start()
	if err != nil {
		t.Fatal(err)
	}
	ns.start(openPIDNamespace(init.Process.Pid))
	if _, err := claimPIDNamespace(name); err == nil {
		t.Error("a second start of a running PID namespace was not refused")
	}

	j := <-joins
	if j.err != nil {
		init.Process.Kill()
		init.Wait()
		t.Fatalf("join: %v", j.err)
	}
	if got := nsPIDs(t, init.Process.Pid); len(got) != 2 || got[1] != "1" {
		t.Errorf("the first command's pids %v: want PID 1 of a namespace of its own", got)
	}
	if got := nsPIDs(t, j.cmd.Process.Pid); len(got) != 2 || got[1] == "1" {
		t.Errorf("the joined command's pids %v: want a second pid, not 1, in the namespace", got)
	}
	if a, b := nsOf(t, init.Process.Pid), nsOf(t, j.cmd.Process.Pid); a != b {
		t.Errorf("the joined command is in %s, its PID 1 in %s", b, a)
	}
	if own, joined := nsOf(t, os.Getpid()), nsOf(t, j.cmd.Process.Pid); own == joined {
		t.Errorf("the joined command is in the agent's own namespace %s", own)
	}

	// PID 1 ends: the kernel kills the rest, and the name is done. (PID
	// 1's exit waits for the rest to be reaped, as the agent's reaper
	// does at once: the joined command first.)
	init.Process.Kill()
	if err := j.cmd.Wait(); err == nil {
		t.Error("the joined command outlived its namespace's PID 1")
	}
	init.Wait()
	ns.end(errNamespaceEnded)
	if fd, err := joinPIDNamespace(name); err == nil {
		unix.Close(fd)
		t.Error("joined a namespace whose PID 1 ended")
	}
	if ns, err := claimPIDNamespace(name); err != nil {
		t.Errorf("the name of an ended namespace cannot be started again: %v", err)
	} else {
		ns.start(-1, os.ErrNotExist)
	}
}

// TestLauncherMountsTheNamespacesProc: a launcher that is PID 1 of a new
// namespace, told to, mounts that namespace's /proc (here in a mount
// namespace of its own, as a chroot does it in the guest), so the
// command sees itself as 1 and no process of the agent's namespace.
func TestLauncherMountsTheNamespacesProc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the launcher starts as root, as the guest agent does")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	cmd := &exec.Cmd{Path: sh, Args: []string{"sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"},
		SysProcAttr: &syscall.SysProcAttr{Credential: &syscall.Credential{},
			Cloneflags: unix.CLONE_NEWPID, Unshareflags: unix.CLONE_NEWNS}}
	l, err := useLauncher(cmd, nil, false, &procMasks{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	// sh is PID 1; ls and grep are the others in the pipeline.
	if lines := strings.Fields(string(out)); len(lines) != 2 || lines[0] != "1" || lines[1] != "3" && lines[1] != "2" {
		t.Errorf("in its own PID namespace, sh printed %q: want its pid 1 and its pipeline's 2 or 3 processes in /proc", out)
	}
}

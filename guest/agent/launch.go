package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/smolvm/smol/agent"
	"golang.org/x/sys/unix"
)

// launcherName is argv[0] of the agent run again as a command's launcher.
//
// Some commands need work between fork and exec that Go's os/exec does
// not offer. A command with capability sets (an OCI container's) must
// drop capabilities from the bounding set, switch user keeping the
// permitted set, then set the five sets. A command that is a root's
// first in a PID namespace must mount the namespace's /proc, which only
// a process inside it can. So the agent starts itself (/proc/self/exe,
// already chrooted in the command's root and in the command's PID
// namespace) as the launcher, which does that work on one thread and
// execs the command from it: execve takes the calling thread's
// credentials, and the process keeps its pid, terminal and descriptors.
const launcherName = "smol-agent-launch"

// launchSpec is what the launcher is told, as JSON in its argv[1]; the
// command's argv follows.
type launchSpec struct {
	Path   string   `json:"path"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	// Caps, if set, are the command's capability sets exactly; nil
	// leaves the kernel's rule: all of them for root, none for others.
	Caps *agent.Capabilities `json:"caps,omitempty"`
	// NoNewPrivs sets the no_new_privs bit before the command's execve.
	NoNewPrivs bool `json:"noNewPrivs,omitempty"`
	// Proc, if set, mounts the launcher's PID namespace's proc on /proc
	// and applies the container's masks below it.
	Proc *procMasks `json:"proc,omitempty"`
	// ReadyFD, if not 0, is the write end of a pipe the agent reads: the
	// launcher closes it by its execve of the command (close-on-exec)
	// and writes one byte to it when it fails instead.
	ReadyFD int `json:"readyFD,omitempty"`
}

// procMasks are a container's masked and read-only paths below /proc.
type procMasks struct {
	Masked   []string `json:"masked,omitempty"`
	ReadOnly []string `json:"readonly,omitempty"`
}

// useLauncher makes cmd (its root, credential and program already
// resolved) start through the launcher. The launcher execs the command
// some time after cmd.Start has returned: the returned launch says when.
func useLauncher(cmd *exec.Cmd, caps *agent.Capabilities, noNewPrivs bool, proc *procMasks) (*launch, error) {
	ready, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	cred := cmd.SysProcAttr.Credential
	spec := launchSpec{Path: cmd.Path, UID: cred.Uid, GID: cred.Gid, Groups: cred.Groups, Caps: caps, NoNewPrivs: noNewPrivs, Proc: proc,
		ReadyFD: 3 + len(cmd.ExtraFiles)}
	cmd.ExtraFiles = append(cmd.ExtraFiles, readyW)
	b, _ := json.Marshal(spec) // plain values: cannot fail
	cmd.Args = append([]string{launcherName, string(b)}, cmd.Args...)
	cmd.Path = "/proc/self/exe"
	cmd.SysProcAttr.Credential = nil // the launcher starts as root and switches itself
	return &launch{ready: ready, readyW: readyW}, nil
}

// launch is the agent's side of one launcher: the pipe it reports on.
type launch struct {
	ready, readyW *os.File
}

// started drops the agent's copy of the pipe's write end, once the
// launcher has its own (after cmd.Start, whether or not it succeeded).
func (l *launch) started() { l.readyW.Close() }

// execed waits for the launcher to exec the command or fail, and says
// whether it exec'd.
func (l *launch) execed() bool {
	defer l.ready.Close()
	var b [1]byte
	n, _ := l.ready.Read(b[:])
	return n == 0
}

// close releases the pipe (idempotent with started and execed).
func (l *launch) close() {
	l.readyW.Close()
	l.ready.Close()
}

// runLauncher is the launcher's whole life: args are its argv after
// argv[0]. It never returns; a failure is one line on stderr and status
// 126, as for a command that cannot be run.
func runLauncher(args []string) {
	readyFD := -1
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "smol-agent: %v\n", err)
		if readyFD > 2 {
			unix.Write(readyFD, []byte{1})
		}
		os.Exit(126)
	}
	if len(args) < 2 {
		fail(fmt.Errorf("launcher: %d arguments", len(args)))
	}
	var spec launchSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		fail(fmt.Errorf("launcher: %w", err))
	}
	if spec.ReadyFD > 2 {
		readyFD = spec.ReadyFD
		unix.CloseOnExec(readyFD) // closed by the command's execve: it runs
	}
	if spec.Proc != nil {
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			fail(fmt.Errorf("mount /proc for the command's PID namespace: %w", err))
		}
		root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = maskPaths(root, spec.Proc.Masked, spec.Proc.ReadOnly)
			unix.Close(root)
		}
		if err != nil {
			fail(fmt.Errorf("the PID namespace's /proc: %w", err))
		}
	}
	runtime.LockOSThread() // credentials are per thread until execve
	var err error
	if spec.Caps != nil {
		err = applyCredentials(spec)
	} else {
		err = switchUser(spec)
	}
	if err != nil {
		fail(err)
	}
	// Last, after the user switch and capability sets: the bit limits
	// what execve grants, not what this thread may still set up.
	if spec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fail(fmt.Errorf("no_new_privs: %w", err))
		}
	}
	err = unix.Exec(spec.Path, args[1:], os.Environ())
	fail(fmt.Errorf("%s: %w", spec.Path, err))
}

// applyCredentials gives the calling thread spec's user, groups and
// capability sets, in the order the kernel allows: the bounding set is
// cut while the thread is still root, the user switched with the
// permitted set kept, then the sets are made exact.
func applyCredentials(spec launchSpec) error {
	bounding := agent.Mask(spec.Caps.Bounding)
	for c := 0; c <= lastCapability(); c++ {
		if bounding&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keep capabilities across the user switch: %w", err)
	}
	if err := switchUser(spec); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("end keeping capabilities: %w", err)
	}
	eff, perm, inh := agent.Mask(spec.Caps.Effective), agent.Mask(spec.Caps.Permitted), agent.Mask(spec.Caps.Inheritable)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(eff), Permitted: uint32(perm), Inheritable: uint32(inh)},
		{Effective: uint32(eff >> 32), Permitted: uint32(perm >> 32), Inheritable: uint32(inh >> 32)},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capability sets: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient capabilities: %w", err)
	}
	for _, c := range spec.Caps.Ambient {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return fmt.Errorf("ambient capability %d (it must be permitted and inheritable): %w", c, err)
		}
	}
	return nil
}

// switchUser gives the calling thread spec's user and groups. Raw system
// calls, not unix.Setuid: those change every thread of the process, and
// only this one's matter.
func switchUser(spec launchSpec) error {
	var groups unsafe.Pointer
	if len(spec.Groups) > 0 {
		groups = unsafe.Pointer(&spec.Groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(spec.Groups)), uintptr(groups), 0); e != 0 {
		return fmt.Errorf("supplementary groups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(spec.GID), uintptr(spec.GID), uintptr(spec.GID)); e != 0 {
		return fmt.Errorf("group %d: %w", spec.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(spec.UID), uintptr(spec.UID), uintptr(spec.UID)); e != 0 {
		return fmt.Errorf("user %d: %w", spec.UID, e)
	}
	return nil
}

// lastCapability is the kernel's highest capability number.
func lastCapability() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > agent.MaxCapability {
		return unix.CAP_LAST_CAP
	}
	return n
}

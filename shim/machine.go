package shim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol"
	"golang.org/x/sys/unix"
)

// groupOf is the group a container belongs to: its pod sandbox's, or its
// own (id) when it is a lone container or the sandbox itself.
func groupOf(id string, spec *specs.Spec) string {
	if spec != nil && spec.Annotations[sandboxAnnotation] != "" {
		return spec.Annotations[sandboxAnnotation]
	}
	return id
}

// groupMachine is the machine a group's containers run in, as the group's
// first container's spec describes it.
type groupMachine struct {
	dir string // the group's directory; its roots/ is shared with the machine
	cfg smol.MachineConfig
}

func newGroupMachine(ns, group string, spec *specs.Spec) groupMachine {
	dir := filepath.Join(stateRoot(), ns, group)
	// The pod's host name (spec.Hostname: the pod's, or the node's for a
	// pod in the host network) is its VM's: the containers share it.
	cfg := smol.MachineConfig{Name: machineName(ns, group), CPUs: 2, Memory: 2 << 30, Hostname: spec.Hostname,
		// In memory: its containers bring their roots (the volume below),
		// and a VM that mounts no disks of its own boots faster.
		InMemory: true,
		// Setuid: an image's setuid files work in its container, as with
		// runc (the VM is the boundary).
		Volumes: []smol.Volume{{Host: filepath.Join(dir, "roots"), Guest: guestRoots, Setuid: true}}}
	if l := spec.Linux; l != nil && l.Resources != nil && l.Resources.Memory != nil && l.Resources.Memory.Limit != nil && *l.Resources.Memory.Limit >= 256<<20 {
		cfg.Memory = uint64(*l.Resources.Memory.Limit)
	}
	return groupMachine{dir: dir, cfg: cfg}
}

// useMachineHome points the machine API at the shims' own machines, and
// their VMM processes at this binary (which serves `machine __vmm`).
func useMachineHome() {
	os.Setenv("SMOL_HOME", filepath.Join(stateRoot(), "home"))
	if exe, err := os.Executable(); err == nil {
		smol.VMMExecutable = exe
	}
}

// create makes the group's directory and creates its machine, in place of
// a leftover of a killed shim.
func (g groupMachine) create(ctx context.Context) (*smol.NamedMachine, error) {
	if err := os.MkdirAll(filepath.Join(g.dir, "roots"), 0o711); err != nil {
		return nil, err
	}
	useMachineHome()
	if old, err := smol.OpenMachine(g.cfg.Name); err == nil {
		old.Remove(ctx, true)
	}
	m, err := smol.CreateMachine(ctx, g.cfg)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", g.cfg.Name, err)
	}
	return m, nil
}

// A group's machine starts in containerd's `shim start` for the group's
// first container (launchForServer), while that process also starts the
// shim's server, which containerd then asks to Create the container; the
// server takes over the wait for the boot (InheritBoot, adoptInheritedBoot). The
// handoff travels as the server's descriptors 4 to 6 and bootHandOffEnv.

// bootHandOffEnv names the handoff: "MACHINE PID CONSOLE-SIZE".
const bootHandOffEnv = "SMOL_SHIM_BOOT"

// inherited is the boot handed to this server, if any, and its machine.
var inherited struct {
	name string
	h    *smol.BootHandOff
}

// launchForServer creates the group's machine and starts its VMM, for the
// server that cmd will run: it adds the handoff to cmd's descriptors, after
// the socket (cmd's only one so far: descriptor 3), and to its
// environment, and returns it, for the caller to close once cmd has
// started.
func launchForServer(ctx context.Context, ns, group string, spec *specs.Spec, cmd *exec.Cmd) (*smol.BootHandOff, error) {
	g := newGroupMachine(ns, group, spec)
	m, err := g.create(ctx)
	if err != nil {
		return nil, err
	}
	h, err := m.LaunchHandOff()
	if err != nil {
		m.Remove(ctx, true)
		return nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, h.Files()...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", bootHandOffEnv, g.cfg.Name, h.PID, h.ConsoleBefore))
	return h, nil
}

// InheritBoot takes the boot `shim start` handed to this server, before
// anything else in the process can open or pass on descriptors: they are
// made close-on-exec here, so that no child of the server holds the
// machine's start lock. A malformed handoff is dropped (Create then
// starts the machine itself).
func InheritBoot() {
	v, ok := os.LookupEnv(bootHandOffEnv)
	if !ok {
		return
	}
	os.Unsetenv(bootHandOffEnv)
	var files []*os.File
	for fd := 4; fd <= 6; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "boot-handoff-"+strconv.Itoa(fd)))
		}
	}
	var (
		name    string
		pid     int
		console int64
		h       *smol.BootHandOff
		err     error
	)
	if n, _ := fmt.Sscanf(v, "%s %d %d", &name, &pid, &console); n != 3 {
		err = fmt.Errorf("%s=%q", bootHandOffEnv, v)
	} else {
		h, err = smol.AdoptFiles(pid, console, files) // refuses a missing descriptor
	}
	if err != nil {
		logf("boot handoff: %v", err)
		for _, f := range files {
			f.Close()
		}
		return
	}
	inherited.name, inherited.h = name, h
}

// adoptInheritedBoot takes over the wait for the boot `shim start` handed
// to this server (InheritBoot), as the server starts: the machine is the
// group's from then on, whether or not containerd ever calls Create (a
// shutdown removes it), and its start lock is let go of when the boot
// ends, so that containerd's `delete` of a container it gave up on can
// remove the machine. A handoff for another machine than the bundle's
// group's is dropped: its VMM boots on, and that delete removes it.
func (s *service) adoptInheritedBoot(ns string) {
	h, name := inherited.h, inherited.name
	if h == nil {
		return
	}
	inherited.h = nil
	spec, err := readSpec(".")
	if err != nil {
		logf("boot handoff: %v", err)
		h.Close()
		return
	}
	g := newGroupMachine(ns, groupOf(s.id, spec), spec)
	if name != g.cfg.Name {
		logf("boot handoff for machine %s, not %s: dropped", name, g.cfg.Name)
		h.Close()
		return
	}
	useMachineHome()
	m, err := smol.OpenMachine(name)
	if err != nil {
		logf("boot handoff: %v", err)
		h.Close()
		return
	}
	s.setMachine(g, m, m.Adopt(context.Background(), h))
}

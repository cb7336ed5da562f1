package shim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	eventstypes "github.com/containerd/containerd/api/events"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/pkg/cri/annotations"
	"github.com/containerd/containerd/runtime"
	cshim "github.com/containerd/containerd/runtime/v2/shim"
	taskapi "github.com/containerd/containerd/runtime/v2/task"
	ptypes "github.com/gogo/protobuf/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/internal/mountinfo"
)

// service is one shim process's task service: the containers of one group
// (a pod sandbox and its containers, or a lone container), all in one
// smol machine. Each container's root filesystem (containerd's snapshot
// mounts) is mounted on the host under the group's shared directory,
// which the machine mounts at guestRoots; the container's processes run
// chrooted in their root there.
type service struct {
	ctx       context.Context
	id        string // the shim's id: its first container's
	publisher cshim.Publisher
	shutdown  func()

	mu         sync.Mutex
	group      string // the machine's group directory
	machine    *smol.NamedMachine
	boot       *smol.Boot    // the machine's start, which goes on after Create
	vmmPID     atomic.Uint32 // boot's VMM process, 0 without a machine (pid)
	memory     uint64        // the machine's memory: the most a container's tmpfs may hold
	containers map[string]*container
}

// container is one task: its bundle, its root and its processes.
type container struct {
	id, bundle string
	rootfs     string // host mount point, under the group's shared directory
	mounted    bool
	sandbox    bool // a CRI pod's sandbox ("pause") container
	init       *process
	execs      map[string]*process
}

// guestRoots is where the machine mounts the group's shared directory.
const guestRoots = "/run/smol/containers"

// New is the shim's task service (containerd's shim.Init).
func New(ctx context.Context, id string, publisher cshim.Publisher, shutdown func()) (cshim.Shim, error) {
	s := &service{ctx: ctx, id: id, publisher: publisher, shutdown: shutdown, containers: map[string]*container{}}
	ns, _ := namespaces.Namespace(ctx)
	s.adoptInheritedBoot(ns)
	return s, nil
}

var _ taskapi.TaskService = (*service)(nil)

// publish sends an event to containerd.
func (s *service) publish(topic string, event any) {
	ns, _ := namespaces.Namespace(s.ctx)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	if err := s.publisher.Publish(ctx, topic, event); err != nil {
		logf("publish %s: %v", topic, err)
	}
}

// machineName names a group's machine: stable, valid, and distinct for
// every namespace and group.
func machineName(ns, group string) string {
	sum := sha256.Sum256([]byte(ns + "/" + group))
	return "ctr-" + hex.EncodeToString(sum[:8])
}

// Create mounts the container's root and, for the group's first
// container, creates and starts the machine.
func (s *service) Create(ctx context.Context, r *taskapi.CreateTaskRequest) (_ *taskapi.CreateTaskResponse, err error) {
	spec, err := readSpec(r.Bundle)
	if err != nil {
		return nil, err
	}
	if spec.Process == nil || len(spec.Process.Args) == 0 {
		return nil, fmt.Errorf("container %s: %w: no process to run", r.ID, errdefs.ErrInvalidArgument)
	}
	var limits *smol.CgroupLimits
	if spec.Linux != nil {
		if limits = cgroupLimits(spec.Linux.Resources); limits != nil {
			if err := limits.Validate(); err != nil {
				return nil, fmt.Errorf("container %s: resources: %v: %w", r.ID, err, errdefs.ErrInvalidArgument)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.containers[r.ID]; dup {
		return nil, fmt.Errorf("container %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	ns, _ := namespaces.Namespace(ctx)
	if s.machine == nil {
		if err := s.startMachine(ctx, ns, spec); err != nil {
			return nil, err
		}
	}
	c := &container{id: r.ID, bundle: r.Bundle, rootfs: filepath.Join(s.group, "roots", r.ID), execs: map[string]*process{},
		sandbox: spec.Annotations[annotations.ContainerType] == annotations.ContainerTypeSandbox}
	if err := os.MkdirAll(c.rootfs, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.unmount()
		}
	}()
	var mounts []mount.Mount
	for _, m := range r.Rootfs {
		mounts = append(mounts, mount.Mount{Type: m.Type, Source: m.Source, Options: m.Options})
	}
	if len(mounts) == 0 { // the bundle holds the root itself (ctr run --rootfs)
		root := spec.Root.Path
		if !filepath.IsAbs(root) {
			root = filepath.Join(r.Bundle, root)
		}
		mounts = []mount.Mount{{Type: "bind", Source: root, Options: []string{"rbind"}}}
	}
	if err := mount.All(mounts, c.rootfs); err != nil {
		return nil, fmt.Errorf("container %s: mount its root: %w", r.ID, err)
	}
	c.mounted = true
	made, err := mountSpec(c.rootfs, spec.Mounts, s.memory)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", r.ID, err)
	}
	root := guestRoot{path: filepath.Join(guestRoots, r.ID), host: c.rootfs, readOnly: spec.Root != nil && spec.Root.Readonly, writable: made.writable, dev: made.dev}
	root.pidNamespace, root.ownPIDNamespace = pidNamespace(spec, r.ID, s.sandboxPIDNamespace(spec))
	root.limits = limits
	if spec.Linux != nil {
		root.masked, root.readOnlyPaths = spec.Linux.MaskedPaths, spec.Linux.ReadonlyPaths
	}
	c.init = newProcess(r.ID, "", root, spec.Process, r.Stdin, r.Stdout, r.Stderr, r.Terminal)
	s.containers[r.ID] = c
	pid := s.pid()
	s.publish(runtime.TaskCreateEventTopic, &eventstypes.TaskCreate{ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs,
		IO: &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal}, Pid: pid})
	return &taskapi.CreateTaskResponse{Pid: pid}, nil
}

// pidNamespace is the guest PID namespace a container's processes run
// in, from the spec's "pid" namespace entry, as runc reads it: none, the
// VM's own ("host" here is the pod's VM); one without a path, its own,
// which its init starts (named by the container's ID); one with a path,
// another task's. containerd reports every task of a pod with one pid,
// its VM's, so such a path cannot say which task's it is: it is taken
// for the pod sandbox's, sandboxNS, which is what CRI gives a container
// of a pod that shares its namespace and of a hostPID pod, whose sandbox
// runs in the VM's (a container targeting another container's namespace
// gets the pod's instead).
func pidNamespace(spec *specs.Spec, id, sandboxNS string) (name string, own bool) {
	if spec.Linux == nil {
		return "", false
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type != specs.PIDNamespace {
			continue
		}
		if ns.Path == "" || spec.Annotations[sandboxAnnotation] == "" {
			return id, true // no pod to share with: a namespace of its own
		}
		return sandboxNS, false
	}
	return "", false
}

// sandboxPIDNamespace is the PID namespace of the pod sandbox a container
// spec names (mu held): the sandbox's own, or the VM's when the sandbox
// has none. A sandbox this shim does not hold is taken to have its own,
// named by its ID, which a join then waits for.
func (s *service) sandboxPIDNamespace(spec *specs.Spec) string {
	sb := spec.Annotations[sandboxAnnotation]
	if c := s.containers[sb]; c != nil && c.init != nil {
		return c.init.root.pidNamespace
	}
	return sb
}

// startMachine creates the group's machine, sharing the group's directory
// of container roots with it, and starts its boot, which Create does not
// wait for: containerd prepares the pod's containers meanwhile, and a
// process's Start waits for it (boot). Where `shim start` began the boot
// already (launchForServer), this server takes over its wait.
func (s *service) startMachine(ctx context.Context, ns string, spec *specs.Spec) error {
	g := newGroupMachine(ns, groupOf(s.id, spec), spec)
	s.group = g.dir
	m, err := g.create(ctx)
	if err != nil {
		return err
	}
	// The boot outlives this request, whose context ends with it.
	b, err := m.Launch(context.WithoutCancel(ctx))
	if err != nil {
		m.Remove(context.Background(), true)
		return fmt.Errorf("machine %s: %w", g.cfg.Name, err)
	}
	s.setMachine(g, m, b)
	return nil
}

// setMachine makes m, booting (b), the group's machine.
func (s *service) setMachine(g groupMachine, m *smol.NamedMachine, b *smol.Boot) {
	s.group, s.machine, s.boot, s.memory = g.dir, m, b, g.cfg.Memory
	s.vmmPID.Store(uint32(b.PID()))
	go func() {
		if err := b.Err(); err != nil {
			logf("machine %s did not start: %v", g.cfg.Name, err)
		}
	}()
}

// booted waits for the group's machine to run (startMachine) and says
// why it does not, if it failed.
func (s *service) booted(ctx context.Context) error {
	s.mu.Lock()
	b := s.boot
	s.mu.Unlock()
	if b == nil {
		return errors.New("the container's machine is gone")
	}
	select {
	case <-b.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := b.Err(); err != nil {
		return fmt.Errorf("the container's machine did not start: %w", err)
	}
	return nil
}

// removeMachine stops and removes the group's machine, once its start
// has ended (a remove cannot overtake a start); mu held.
func (s *service) removeMachine() {
	if s.machine == nil {
		return
	}
	if s.boot != nil {
		<-s.boot.Done()
	}
	s.machine.Remove(context.Background(), true)
	s.machine, s.boot = nil, nil
	s.vmmPID.Store(0)
}

// A pod's containers carry its sandbox's id (annotations.SandboxID), which
// groups them into one shim and machine; the sandbox container itself,
// a placeholder whose start does not wait for the machine (Start), is
// marked annotations.ContainerType "sandbox".
const sandboxAnnotation = annotations.SandboxID

// stateRoot is where shims keep machines and container roots.
func stateRoot() string {
	if d := os.Getenv("SMOL_SHIM_ROOT"); d != "" {
		return d
	}
	return "/run/containerd-shim-smol"
}

func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("%s/config.json: %w", bundle, err)
	}
	return &spec, nil
}

// pid is what containerd is told the processes' pid is: the machine's
// VMM process (the guest's own pids mean nothing on the host).
// It is read without mu (exit reports hold no lock), so it is kept apart
// from boot.
func (s *service) pid() uint32 { return s.vmmPID.Load() }

// find returns the process of a request.
func (s *service) find(id, execID string) (*container, *process, error) {
	c := s.containers[id]
	if c == nil {
		return nil, nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	if execID == "" {
		return c, c.init, nil
	}
	p := c.execs[execID]
	if p == nil {
		return nil, nil, fmt.Errorf("exec %s in %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, p, nil
}

// process finds a request's process, under the lock.
func (s *service) process(id, execID string) (*container, *process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(id, execID)
}

// Start runs the container's init process or one of its execs, once the
// machine runs, and answers once the process's program runs in the guest
// (or has ended, its status then reported as its exit). It waits for the
// machine's boot and fails with it, except
// for a pod's sandbox container, a placeholder that is running while the
// machine boots (and ends, with status 255, if the boot fails). That lets
// containerd prepare the pod's first container while the VM boots.
func (s *service) Start(ctx context.Context, r *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	s.mu.Lock()
	c, p, err := s.find(r.ID, r.ExecID)
	m := s.machine
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := p.claimStart(); err != nil {
		return nil, err
	}
	defer p.startReported() // after the start event below, if any
	placeholder := c.sandbox && r.ExecID == ""
	if !placeholder {
		if err := s.booted(ctx); err != nil {
			p.startFailed()
			return nil, err
		}
	}
	if err := p.start(ctx, m, s.booted, s.exited, !placeholder); err != nil {
		p.startFailed()
		return nil, err
	}
	pid := s.pid()
	if r.ExecID == "" {
		s.publish(runtime.TaskStartEventTopic, &eventstypes.TaskStart{ContainerID: r.ID, Pid: pid})
	} else {
		s.publish(runtime.TaskExecStartedEventTopic, &eventstypes.TaskExecStarted{ContainerID: r.ID, ExecID: r.ExecID, Pid: pid})
	}
	return &taskapi.StartResponse{Pid: pid}, nil
}

// exited reports a process's end.
func (s *service) exited(p *process) {
	_, code, at := p.state()
	id := p.execID
	if id == "" {
		id = p.containerID
	}
	p.mu.Lock()
	oom := p.oomKilled
	p.mu.Unlock()
	if oom && p.execID == "" {
		// Before the exit, so that CRI gives the container's end the
		// reason OOMKilled.
		s.publish(runtime.TaskOOMEventTopic, &eventstypes.TaskOOM{ContainerID: p.containerID})
	}
	s.publish(runtime.TaskExitEventTopic, &eventstypes.TaskExit{ContainerID: p.containerID, ID: id, Pid: s.pid(), ExitStatus: code, ExitedAt: at})
}

// Delete removes an exec, or the container (its root unmounted; the
// machine stopped with the group's last container).
func (s *service) Delete(ctx context.Context, r *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, p, err := s.find(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	st, code, at := p.state()
	if st == tasktypes.StatusRunning || p.startInProgress() {
		return nil, fmt.Errorf("process %s%s: %w: still running", r.ID, r.ExecID, errdefs.ErrFailedPrecondition)
	}
	pid := s.pid()
	if r.ExecID != "" {
		delete(c.execs, r.ExecID)
		return &taskapi.DeleteResponse{Pid: pid, ExitStatus: code, ExitedAt: at}, nil
	}
	for _, e := range c.execs {
		e.kill(syscall.SIGKILL)
	}
	delete(s.containers, r.ID)
	if len(s.containers) == 0 {
		s.removeMachine()
	}
	c.unmount()
	s.publish(runtime.TaskDeleteEventTopic, &eventstypes.TaskDelete{ContainerID: r.ID, Pid: pid, ExitStatus: code, ExitedAt: at})
	return &taskapi.DeleteResponse{Pid: pid, ExitStatus: code, ExitedAt: at}, nil
}

// unmount takes the container's root away from the host's view. The
// mount is detached (MNT_DETACH): the machine's 9P server may still hold
// descriptors in it (the guest's mounts in that root), and those go with
// the files, not with the name.
func (c *container) unmount() {
	if c.mounted {
		if err := mountinfo.DetachAllUnder(c.rootfs); err != nil {
			logf("container root %s: %v", c.rootfs, err)
		}
		c.mounted = false
	}
	os.Remove(c.rootfs)
}

// Exec adds a process to a container; Start runs it.
func (s *service) Exec(ctx context.Context, r *taskapi.ExecProcessRequest) (*ptypes.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.containers[r.ID]
	if c == nil {
		return nil, fmt.Errorf("container %s: %w", r.ID, errdefs.ErrNotFound)
	}
	if _, dup := c.execs[r.ExecID]; dup {
		return nil, fmt.Errorf("exec %s: %w", r.ExecID, errdefs.ErrAlreadyExists)
	}
	var spec specs.Process
	if r.Spec == nil || json.Unmarshal(r.Spec.Value, &spec) != nil || len(spec.Args) == 0 {
		return nil, fmt.Errorf("exec %s: %w: no process", r.ExecID, errdefs.ErrInvalidArgument)
	}
	c.execs[r.ExecID] = newProcess(r.ID, r.ExecID, c.init.root, &spec, r.Stdin, r.Stdout, r.Stderr, r.Terminal)
	s.publish(runtime.TaskExecAddedEventTopic, &eventstypes.TaskExecAdded{ContainerID: r.ID, ExecID: r.ExecID})
	return &ptypes.Empty{}, nil
}

// State reports a process.
func (s *service) State(ctx context.Context, r *taskapi.StateRequest) (*taskapi.StateResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	st, code, at := p.state()
	return &taskapi.StateResponse{ID: r.ID, ExecID: r.ExecID, Bundle: c.bundle, Pid: s.pid(), Status: st,
		Stdin: p.stdin, Stdout: p.stdout, Stderr: p.stderr, Terminal: p.terminal, ExitStatus: code, ExitedAt: at}, nil
}

// Kill signals a process (with All, every process of the container).
func (s *service) Kill(ctx context.Context, r *taskapi.KillRequest) (*ptypes.Empty, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	sig := syscall.Signal(r.Signal)
	if sig <= 0 || sig > 64 {
		return nil, fmt.Errorf("signal %d: %w", r.Signal, errdefs.ErrInvalidArgument)
	}
	if st, _, _ := p.state(); st == tasktypes.StatusCreated {
		return nil, fmt.Errorf("process %s%s: %w: not started", r.ID, r.ExecID, errdefs.ErrFailedPrecondition)
	}
	p.kill(sig)
	if r.All {
		s.mu.Lock() // Exec and Delete change the map
		execs := make([]*process, 0, len(c.execs))
		for _, e := range c.execs {
			execs = append(execs, e)
		}
		s.mu.Unlock()
		for _, e := range execs {
			e.kill(sig)
		}
	}
	return &ptypes.Empty{}, nil
}

// Wait blocks until the process ends.
func (s *service) Wait(ctx context.Context, r *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	_, code, at := p.state()
	return &taskapi.WaitResponse{ExitStatus: code, ExitedAt: at}, nil
}

// Pids lists the container's processes, as the host sees them: the
// machine's VMM.
func (s *service) Pids(ctx context.Context, r *taskapi.PidsRequest) (*taskapi.PidsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containers[r.ID] == nil {
		return nil, fmt.Errorf("container %s: %w", r.ID, errdefs.ErrNotFound)
	}
	return &taskapi.PidsResponse{Processes: []*tasktypes.ProcessInfo{{Pid: s.pid()}}}, nil
}

// Pause parks the machine's vCPUs (every container of the group).
func (s *service) Pause(ctx context.Context, r *taskapi.PauseRequest) (*ptypes.Empty, error) {
	return s.lifecycle(ctx, r.ID, true)
}

// Resume lets the machine run again.
func (s *service) Resume(ctx context.Context, r *taskapi.ResumeRequest) (*ptypes.Empty, error) {
	return s.lifecycle(ctx, r.ID, false)
}

func (s *service) lifecycle(ctx context.Context, id string, pause bool) (*ptypes.Empty, error) {
	s.mu.Lock()
	m, c := s.machine, s.containers[id]
	s.mu.Unlock()
	if c == nil || m == nil {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	if pause {
		if err := m.Pause(ctx); err != nil {
			return nil, err
		}
		s.publish(runtime.TaskPausedEventTopic, &eventstypes.TaskPaused{ContainerID: id})
	} else {
		if err := m.Resume(ctx); err != nil {
			return nil, err
		}
		s.publish(runtime.TaskResumedEventTopic, &eventstypes.TaskResumed{ContainerID: id})
	}
	return &ptypes.Empty{}, nil
}

// ResizePty resizes a process's terminal.
func (s *service) ResizePty(ctx context.Context, r *taskapi.ResizePtyRequest) (*ptypes.Empty, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	select {
	case p.resize <- smol.Winsize{Rows: uint16(r.Height), Cols: uint16(r.Width)}:
	default:
	}
	return &ptypes.Empty{}, nil
}

// CloseIO ends a process's stdin.
func (s *service) CloseIO(ctx context.Context, r *taskapi.CloseIORequest) (*ptypes.Empty, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if r.Stdin {
		p.closeStdin()
	}
	return &ptypes.Empty{}, nil
}

// Connect reports the shim's and the task's pids.
func (s *service) Connect(ctx context.Context, r *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &taskapi.ConnectResponse{ShimPid: uint32(os.Getpid()), TaskPid: s.pid()}, nil
}

// Shutdown ends the shim once it holds no container.
func (s *service) Shutdown(ctx context.Context, r *taskapi.ShutdownRequest) (*ptypes.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.containers) > 0 && !r.Now {
		return &ptypes.Empty{}, nil
	}
	s.removeMachine()
	s.shutdown()
	return &ptypes.Empty{}, nil
}

// Stats, Update and Checkpoint are not supported: a machine's cgroup
// figures are not the container's, resources are fixed at the machine's
// creation, and checkpoints go through smol machine snapshot.
func (s *service) Checkpoint(context.Context, *taskapi.CheckpointTaskRequest) (*ptypes.Empty, error) {
	return nil, errdefs.ErrNotImplemented
}

package smol

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/internal/tarcopy"
	"github.com/smolvm/smol/internal/termsafe"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/vmm"
)

// Persistent machines: named VMs that live across many commands, each run
// by a VMM process of its own (package machine has the files and the
// control API; the VMM side is vmm_process.go).

// MachineConfig describes a machine to create.
type MachineConfig struct {
	Name     string
	Image    string // image reference, as for `smol run --image`; "" is smol's busybox root (BuiltinRoot)
	Pull     imagefs.PullPolicy
	Insecure bool
	Progress io.Writer // pull progress; nil is quiet

	CPUs    int    // 0 means DefaultCPUs
	Memory  uint64 // 0 means DefaultMemory
	Storage int64  // bytes of the persistent writable layer; 0 means DefaultStorage
	// InMemory runs the machine in smol's busybox userland straight from
	// its initramfs, in guest memory, as `smol run -- CMD` does: no root
	// disk, no writable layer, so its files start afresh at every start.
	// It suits a machine whose workloads bring their own roots, as the
	// containerd shim's pods do (their containers' roots are a volume),
	// and it boots faster: no disks to probe, mount and overlay. It takes
	// no Image, Storage or From, and such a machine cannot be
	// snapshotted, forked or packed.
	InMemory bool

	Disks []Disk // extra disks
	// IRQChip is where the interrupt controllers live, as Config.IRQChip;
	// "" means DefaultIRQChip. It is recorded with the machine.
	IRQChip string
	// Volumes are host directories mounted in the guest at every start
	// (checked at create and at start). A machine with volumes cannot be
	// snapshotted, forked or packed.
	Volumes []Volume

	// Defaults for every exec, over the image's.
	Env     []string
	Workdir string
	User    string

	// Hostname is the guest's host name; "" means the machine's name.
	Hostname string

	// From makes the machine the pack at this path holds (a .smolmachine
	// file or its stub; smol pack create) instead of from Image: its
	// kernel, agent, root, writable layer and live state, with its shape
	// and exec defaults where the fields above are zero.
	From string

	// Net gives the machine a network behind smol's userspace gateway
	// (AllowHosts, AllowCIDRs and DNS apply; a TAP is refused); nil: none.
	// Its egress log is kept with the machine (Events).
	Net *Net
	// GPU gives the machine a display (NamedMachine.Screenshot); nil: none.
	GPU *GPU
}

// DefaultStorage is the size of a machine's writable layer: a sparse
// file, so it costs only what the guest writes.
const DefaultStorage = 20 << 30

// MachineHome is where machines (and images) are kept: $SMOL_HOME, by
// default ~/.local/share/smol.
func MachineHome() string { return imagefs.DefaultHome() }

func machineStore() (*machine.Store, error) { return machine.OpenStore(MachineHome()) }

// NamedMachine is a persistent machine, started or not. Its methods are
// clients of the machine's VMM process; the machine outlives the program
// that holds this value.
type NamedMachine struct {
	store *machine.Store
	spec  *machine.Spec
}

// CreateMachine pulls the image (per c.Pull) and records the machine;
// nothing boots.
func CreateMachine(ctx context.Context, c MachineConfig) (*NamedMachine, error) {
	if err := machine.ValidateName(c.Name); err != nil {
		return nil, err
	}
	st, err := machineStore()
	if err != nil {
		return nil, err
	}
	if _, err := st.Load(c.Name); err == nil {
		return nil, fmt.Errorf("machine %s: %w", c.Name, machine.ErrExists)
	} else if !errors.Is(err, machine.ErrNotFound) {
		return nil, err
	}
	if c.From != "" {
		if c.InMemory {
			return nil, errors.New("a machine made from a pack has its own root: it cannot run in memory")
		}
		return createFromPack(st, c)
	}
	spec, err := newSpec(c)
	if err != nil {
		return nil, err
	}
	if c.InMemory {
		if err := st.Create(spec); err != nil {
			return nil, err
		}
		return &NamedMachine{store: st, spec: spec}, nil
	}
	images, err := imagefs.Open(MachineHome())
	if err != nil {
		return nil, err
	}
	var img *imagefs.Image
	ref := c.Image
	if ref == "" {
		ref = BuiltinRoot
		img, err = builtinRootImage(ctx, images, c.Progress)
	} else {
		img, err = images.Get(ctx, c.Image, imagefs.Options{Pull: c.Pull, Insecure: c.Insecure, Progress: c.Progress})
	}
	if err != nil {
		return nil, err
	}
	spec.Image = &machine.Image{Ref: ref, Digest: img.Digest, Disk: img.Disk, Config: img.Config}
	if err := st.Create(spec); err != nil {
		return nil, err
	}
	return &NamedMachine{store: st, spec: spec}, nil
}

// newSpec is the record of the machine c describes, but its image.
func newSpec(c MachineConfig) (*machine.Spec, error) {
	spec := &machine.Spec{Name: c.Name, Created: time.Now().UTC(), CPUs: c.CPUs, Memory: c.Memory, Storage: c.Storage,
		Env: c.Env, Workdir: c.Workdir, User: c.User, Hostname: c.Hostname}
	if spec.Hostname != "" { // the record's check would refuse it too, but only after the image's pull
		if err := machine.ValidateHostname(spec.Hostname); err != nil {
			return nil, err
		}
	}
	if spec.CPUs == 0 {
		spec.CPUs = DefaultCPUs
	}
	chip, err := vmm.ParseIRQChip(c.IRQChip)
	if err != nil {
		return nil, err
	}
	spec.IRQChip = string(chip)
	if spec.Memory == 0 {
		spec.Memory = DefaultMemory
	}
	switch {
	case c.InMemory && c.Image != "":
		return nil, errors.New("a machine in memory runs smol's busybox root: it takes no image")
	case c.InMemory && c.Storage != 0:
		return nil, errors.New("a machine in memory has no writable layer: it takes no storage size")
	case c.InMemory:
		spec.InMemory = true
	case spec.Storage == 0:
		spec.Storage = DefaultStorage
	}
	if n := c.Net; n != nil {
		if n.TAP != "" || n.MAC != "" {
			return nil, errors.New("a machine's network is smol's gateway: it takes no TAP or MAC")
		}
		spec.Net = &machine.Net{AllowHosts: n.AllowHosts, AllowCIDRs: n.AllowCIDRs, DNS: n.DNS, Publish: n.Publish, NoEgress: n.NoEgress}
	}
	if g := c.GPU; g != nil {
		w, h := cmp.Or(g.Width, gpu.DefaultWidth), cmp.Or(g.Height, gpu.DefaultHeight)
		if err := gpu.CheckSize(w, h); err != nil {
			return nil, err
		}
		spec.GPU = &machine.GPU{Width: w, Height: h, Virgl: g.Virgl}
	}
	vols, err := checkVolumes(c.Volumes)
	if err != nil {
		return nil, err
	}
	spec.Volumes = vols
	for _, d := range c.Disks {
		p, err := filepath.Abs(d.Path)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Path, err)
		}
		spec.Disks = append(spec.Disks, machine.Disk{Path: p, ReadOnly: d.ReadOnly})
	}
	return spec, nil
}

// OpenMachine finds a created machine.
func OpenMachine(name string) (*NamedMachine, error) {
	st, err := machineStore()
	if err != nil {
		return nil, err
	}
	spec, err := st.Load(name)
	if err != nil {
		return nil, err
	}
	return &NamedMachine{store: st, spec: spec}, nil
}

// ListMachines returns the status of every machine.
func ListMachines(ctx context.Context) ([]MachineStatus, error) {
	st, err := machineStore()
	if err != nil {
		return nil, err
	}
	st.Sweep()
	names, err := st.Names()
	if err != nil {
		return nil, err
	}
	var out []MachineStatus
	for _, n := range names {
		m, err := OpenMachine(n)
		if err != nil {
			out = append(out, MachineStatus{Name: n, State: machine.Failed, Error: err.Error()})
			continue
		}
		s, err := m.Status(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Name is the machine's name.
func (m *NamedMachine) Name() string { return m.spec.Name }

// Spec is what the machine was created with.
func (m *NamedMachine) Spec() machine.Spec { return *m.spec }

// MachineStatus is a machine's state and, while it runs, its VMM's view.
type MachineStatus struct {
	Name    string        `json:"name"`
	State   machine.State `json:"state"`
	Image   string        `json:"image"`
	CPUs    int           `json:"cpus"`
	Memory  uint64        `json:"memory"`
	IRQChip string        `json:"irqchip,omitempty"` // at a cold start; "" in records from before it was one
	PID     int           `json:"pid,omitempty"`
	Started time.Time     `json:"started,omitzero"`
	Uptime  Duration      `json:"uptime,omitempty"`
	// HostMemory is what the running VM costs the host (VMM resident
	// memory, touched guest RAM included).
	HostMemory uint64 `json:"hostMemory,omitempty"`
	Error      string `json:"error,omitempty"`
	// LastConsole is the end of the console of a failed machine.
	LastConsole string `json:"lastConsole,omitempty"`
	// Socket is the machine's control API socket (docs/api.md).
	Socket string `json:"socket"`
}

// Duration prints as "1h2m3s" in JSON.
type Duration = machine.Duration

func (m *NamedMachine) client() *machine.Client {
	return machine.NewClient(m.store.SocketPath(m.spec.Name, machine.ControlSock))
}

// Status reads the machine's state, asking its VMM when it runs.
func (m *NamedMachine) Status(ctx context.Context) (MachineStatus, error) {
	fs, err := m.store.Status(m.spec.Name)
	if err != nil {
		return MachineStatus{}, err
	}
	s := MachineStatus{Name: m.spec.Name, State: fs.State, CPUs: m.spec.CPUs, Memory: m.spec.Memory, IRQChip: m.spec.IRQChip,
		PID: fs.PID, Started: fs.Started, Error: fs.Error, Socket: m.store.SocketPath(m.spec.Name, machine.ControlSock)}
	s.Image = rootName(m.spec)
	switch fs.State {
	case machine.Running, machine.Paused:
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if info, err := m.client().Status(cctx); err == nil {
			s.State, s.HostMemory = info.State, info.HostMemory
		}
		s.Uptime = Duration(time.Since(fs.Started).Round(time.Second))
	case machine.Failed:
		s.LastConsole = lastLines(termsafe.Text(string(m.store.Tail(m.spec.Name, 4096))), 10)
	}
	return s, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// VMMExecutable is the smol binary that runs machines' VMM processes.
// Empty means this program itself when it is smol (the CLI sets it),
// else "smol" on PATH.
var VMMExecutable string

// Start boots the machine in a VMM process of its own and returns once
// the guest agent answers; the machine keeps running after this program
// exits. A machine made from a live pack resumes its packed processes
// the first time (LiveState), where this host's CPU allows.
func (m *NamedMachine) Start(ctx context.Context) error {
	return m.startVMM(ctx, m.startSource())
}

// Launch is Start without the wait: it returns once the machine's VMM
// process runs, and the Boot says when the guest's agent answers, or why
// it never will. The boot goes on, under ctx, after Launch returns: a
// caller with other work to do while the guest boots (the containerd
// shim, preparing a pod's containers) does it in the meantime.
func (m *NamedMachine) Launch(ctx context.Context) (*Boot, error) {
	return m.launchVMM(ctx, m.startSource())
}

// Boot is a machine starting in its VMM process (Launch).
type Boot struct {
	pid  int
	done chan struct{}
	err  error
}

// PID is the machine's VMM process.
func (b *Boot) PID() int { return b.pid }

// Done is closed when the machine runs or has failed to.
func (b *Boot) Done() <-chan struct{} { return b.done }

// Err is, once Done is closed, nil if the machine runs, else why it does
// not (its VMM process is gone then).
func (b *Boot) Err() error {
	<-b.done
	return b.err
}

// startVMM starts the machine's VMM process, booting it or restoring it
// from src, and waits until it says the machine runs.
func (m *NamedMachine) startVMM(ctx context.Context, src VMMSource) error {
	b, err := m.launchVMM(ctx, src)
	if err != nil {
		return err
	}
	return b.Err()
}

// launchVMM starts the machine's VMM process and returns while it boots
// or restores; the machine's start lock is held until the Boot is done.
func (m *NamedMachine) launchVMM(ctx context.Context, src VMMSource) (*Boot, error) {
	v, err := m.spawnVMM(src)
	if err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		v.cmd.Wait()
		close(exited)
	}()
	proc := vmmProcess{pid: v.cmd.Process.Pid, exited: exited, kill: func() { v.cmd.Process.Kill() }}
	return m.awaitBoot(ctx, proc, v.ready, v.lock.File(), v.consoleBefore), nil
}

// spawnedVMM is a VMM process just started, booting or restoring its
// machine: whoever holds it waits for its word on ready (awaitBoot),
// holding the machine's start lock meanwhile.
type spawnedVMM struct {
	cmd           *exec.Cmd
	ready         *os.File // read end of the pipe the VMM says "running" on
	lock          *machine.Lock
	consoleBefore int64 // the console log's size before this boot
}

// spawnVMM takes the machine's start lock and starts its VMM process.
func (m *NamedMachine) spawnVMM(src VMMSource) (_ *spawnedVMM, err error) {
	name := m.spec.Name
	sl, err := m.lockStart()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sl.Unlock()
		}
	}()
	if m.store.Alive(name) {
		return nil, fmt.Errorf("machine %s is already running", name)
	}
	bin := VMMExecutable
	if bin == "" {
		if bin, err = exec.LookPath("smol"); err != nil {
			return nil, errors.New("cannot find the smol binary to run the machine's VMM (set smol.VMMExecutable)")
		}
	}
	logf, err := os.OpenFile(m.store.Path(name, machine.VMMLog), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"machine", vmmCommand, name}
	if src.Snapshot != "" {
		args = append(args, "--restore", src.Snapshot)
	}
	cmd := exec.Command(bin, args...)
	if src.RAM.Base != nil {
		cmd.Args = append(cmd.Args, "--ram-fd", strconv.Itoa(forkChildFD))
		if src.RAM.Overlay != nil {
			cmd.Args = append(cmd.Args, "--ram-overlay-fd", strconv.Itoa(forkChildOverlayFD))
		}
		cmd.ExtraFiles = src.RAM.Files()
	}
	// The VMM says on this pipe when the machine runs (VMMSource.Ready).
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Args = append(cmd.Args, "--ready-fd", strconv.Itoa(3+len(cmd.ExtraFiles)))
	cmd.ExtraFiles = append(cmd.ExtraFiles, readyW)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // not killed with our session or terminal
	cmd.Env = append(os.Environ(), "SMOL_HOME="+MachineHome())
	consoleBefore := m.store.ConsoleSize(name)
	vmm.TracePhase("machine: starting %s's VMM process", name)
	err = cmd.Start()
	readyW.Close() // the VMM's copy is the one that counts
	if err != nil {
		readyR.Close()
		return nil, fmt.Errorf("start the VMM process: %w", err)
	}
	return &spawnedVMM{cmd: cmd, ready: readyR, lock: sl, consoleBefore: consoleBefore}, nil
}

// vmmProcess is a machine's VMM process as the one waiting for its boot
// sees it: its own child (launchVMM), or another process's (Adopt).
type vmmProcess struct {
	pid    int
	exited <-chan struct{} // closed when the process has ended
	kill   func()
}

// awaitBoot returns a Boot that ends when the VMM process proc says on
// ready that the machine runs, or has failed to; it closes ready and
// startLock (the machine's start lock, held until then) when it ends.
func (m *NamedMachine) awaitBoot(ctx context.Context, proc vmmProcess, ready, startLock *os.File, consoleBefore int64) *Boot {
	b := &Boot{pid: proc.pid, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		defer startLock.Close()
		defer ready.Close()
		b.err = m.awaitVMM(ctx, proc, ready, consoleBefore)
	}()
	return b
}

// awaitVMM waits until the VMM process proc says on ready that the
// machine runs, and checks that its state says so too; a VMM that dies,
// takes too long or is cancelled with ctx is gone when this returns an
// error.
func (m *NamedMachine) awaitVMM(ctx context.Context, proc vmmProcess, ready io.Reader, consoleBefore int64) error {
	name := m.spec.Name
	logPath := m.store.Path(name, machine.VMMLog)
	said := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, _ := ready.Read(b[:])
		said <- n == 1
	}()
	stop := func() {
		proc.kill()
		<-proc.exited
	}
	deadline := time.After(agentBootTimeout + 30*time.Second)
	for {
		select {
		case <-proc.exited:
			return m.startFailure(logPath, consoleBefore)
		case <-ctx.Done():
			stop()
			return ctx.Err()
		case <-deadline:
			stop()
			return fmt.Errorf("machine %s did not start within %v", name, agentBootTimeout+30*time.Second)
		case ok := <-said:
			// Without the byte, the VMM closed the pipe as it died:
			// its exit (above) tells why.
			if st, err := m.store.Status(name); ok && err == nil && st.State == machine.Running && st.PID == proc.pid {
				// The VMM is on its own now; the goroutine watching
				// for its exit stays blocked until it exits or we do.
				return nil
			}
			if ok {
				stop()
				return fmt.Errorf("machine %s did not start: its VMM said it runs, its state does not", name)
			}
		}
	}
}

// lockStart takes the machine's start lock, which a start holds until
// its VMM is up and a remove while it deletes: one of them at a time.
func (m *NamedMachine) lockStart() (*machine.Lock, error) {
	l, err := m.store.TryLock(m.spec.Name, machine.StartLock)
	if errors.Is(err, machine.ErrLocked) {
		return nil, &startingError{m.spec.Name}
	}
	return l, err
}

// startingError is lockStart's answer while another command holds the
// start lock.
type startingError struct{ name string }

func (e *startingError) Error() string {
	return fmt.Sprintf("machine %s is being started by another command", e.name)
}

// startFailure says why a VMM process ended before its machine ran: the
// process's last line, and the end of what this start's guest wrote on
// its console, if it wrote anything (a guest kernel that panicked, whose
// reset ends the VM without a VMM error, says why only there).
func (m *NamedMachine) startFailure(logPath string, consoleBefore int64) error {
	err := fmt.Errorf("machine %s did not start: %s", m.spec.Name, vmmFailure(logPath))
	if tail := lastLines(termsafe.Text(string(m.store.TailSince(m.spec.Name, consoleBefore, 4096))), 10); tail != "" {
		return fmt.Errorf("%w; guest console ends with:\n%s", err, tail)
	}
	return err
}

// vmmFailure is the last line the VMM process wrote (its error) or, when
// the process died of a Go panic or runtime fault, whose report ends in a
// goroutine dump or register listing rather than in the cause, that
// report's first line and where the whole report is.
func vmmFailure(logPath string) string {
	b, _ := os.ReadFile(logPath)
	text := termsafe.Text(string(b))
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			return fmt.Sprintf("its VMM process crashed: %s (the whole report is in %s)", line, logPath)
		}
	}
	s := lastLines(text, 1)
	if s == "" {
		return "its VMM process exited without a word"
	}
	return strings.TrimPrefix(s, "smol: ")
}

// Stop shuts the machine down cleanly, or hard after timeout, and returns
// once its VMM process is gone.
func (m *NamedMachine) Stop(ctx context.Context, timeout time.Duration) error {
	if timeout < 0 {
		return errors.New("negative stop timeout")
	}
	name := m.spec.Name
	st, err := m.store.Status(name)
	if err != nil {
		return err
	}
	if st.State != machine.Running && st.State != machine.Starting && st.State != machine.Paused {
		return fmt.Errorf("machine %s is %s", name, st.State)
	}
	if err := m.client().Stop(ctx, timeout); err != nil && !errors.Is(err, machine.ErrNoVMM) {
		return err
	}
	return m.waitGone(ctx)
}

// waitGone waits for the machine's VMM process to let go of the machine
// (its VM has ended, or is being stopped).
func (m *NamedMachine) waitGone(ctx context.Context) error {
	for i := 0; m.store.Alive(m.spec.Name); i++ {
		if i == 200 { // 10 s
			return fmt.Errorf("machine %s: its VMM process does not exit", m.spec.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Pause parks the running machine's vCPUs: its processes stand still and
// use no host CPU until Resume.
func (m *NamedMachine) Pause(ctx context.Context) error { return m.lifecycle(ctx, "pause") }

// Resume lets a paused machine run again.
func (m *NamedMachine) Resume(ctx context.Context) error { return m.lifecycle(ctx, "resume") }

func (m *NamedMachine) lifecycle(ctx context.Context, what string) error {
	name := m.spec.Name
	st, err := m.store.Status(name)
	if err != nil {
		return err
	}
	if st.State != machine.Running && st.State != machine.Paused {
		return fmt.Errorf("machine %s is %s; only a running machine can %s", name, st.State, what)
	}
	c := m.client()
	if what == "pause" {
		err = c.Pause(ctx)
	} else {
		err = c.Resume(ctx)
	}
	if err != nil {
		return fmt.Errorf("machine %s: %w", name, err)
	}
	return nil
}

// Exec runs a command in the running machine through its agent, with the
// semantics of RunCommand: the exit status, separate streams, stdin, TTY,
// signals. Many execs may run at once.
func (m *NamedMachine) Exec(ctx context.Context, cmd Command) (int, error) {
	st, err := m.Run(ctx, cmd)
	return st.Code, err
}

// ExitStatus is how a command in a machine ended.
type ExitStatus struct {
	// Code is what Exec returns: the exit code, or 128+N for signal N.
	Code int
	// OOMKilled: the guest kernel's OOM killer ended a process in the
	// command's cgroup (Command.Cgroup) while it ran, its memory limit
	// (Command.Limits) reached.
	OOMKilled bool
}

// Run is Exec that also says whether the command's cgroup ran out of
// memory (what a container runtime reports as OOMKilled).
func (m *NamedMachine) Run(ctx context.Context, cmd Command) (ExitStatus, error) {
	cmd.Env = append(append([]string(nil), m.spec.Env...), cmd.Env...)
	cmd.Dir = first(cmd.Dir, m.spec.Workdir)
	cmd.User = first(cmd.User, m.spec.User)
	start, err := startRequest(m.image(), cmd)
	if err != nil {
		return ExitStatus{}, err
	}
	start.PowerOff = false
	exit, err := m.session(ctx, start, agent.Streams{
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr, Signals: cmd.Signals, Resize: cmd.Resize, Started: cmd.Started,
	})
	if err != nil {
		return ExitStatus{}, err
	}
	st := ExitStatus{Code: exit.Code, OOMKilled: exit.OOMKilled}
	if exit.Error != "" {
		return st, &CommandError{Code: exit.Code, Msg: exit.Error}
	}
	return st, nil
}

// session runs one agent session in the running machine.
func (m *NamedMachine) session(ctx context.Context, start agent.Start, streams agent.Streams) (agent.Exit, error) {
	name := m.spec.Name
	st, err := m.store.Status(name)
	if err != nil {
		return agent.Exit{}, err
	}
	switch st.State {
	case machine.Running:
	case machine.Paused:
		return agent.Exit{}, fmt.Errorf("machine %s is paused; resume it with: smol machine resume %s", name, name)
	default:
		return agent.Exit{}, fmt.Errorf("machine %s is %s; start it with: smol machine start %s", name, st.State, name)
	}
	conn, err := m.client().Exec(ctx)
	if err != nil {
		return agent.Exit{}, fmt.Errorf("machine %s: %w", name, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	exit, err := agent.Run(conn, start, streams)
	if ctx.Err() != nil {
		return agent.Exit{}, ctx.Err()
	}
	if err != nil {
		return agent.Exit{}, fmt.Errorf("machine %s: %w", name, err)
	}
	return exit, nil
}

// CgroupStats returns the use of guest cgroup name, the one commands
// given Command.Cgroup name run in: its CPU time, memory and processes.
func (m *NamedMachine) CgroupStats(ctx context.Context, name string) (CgroupStats, error) {
	if err := agent.ValidCgroupName(name); err != nil {
		return CgroupStats{}, err
	}
	// One frame of plain numbers; anything longer is not an answer.
	out := &limitedBuffer{max: 4 << 10}
	exit, err := m.session(ctx, agent.Start{Stats: name}, agent.Streams{Stdout: out})
	if err != nil {
		return CgroupStats{}, err
	}
	if exit.Error != "" {
		return CgroupStats{}, fmt.Errorf("%s: %s", m.spec.Name, termsafe.Line(exit.Error))
	}
	var st CgroupStats
	if out.over {
		return st, fmt.Errorf("%s: the guest's cgroup stats are longer than %d bytes", m.spec.Name, out.max)
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return st, fmt.Errorf("%s: the guest's cgroup stats: %w", m.spec.Name, err)
	}
	return st, nil
}

// SetCgroupLimits sets the limits of guest cgroup name (made if missing),
// the one commands given Command.Cgroup name run in: all of them, zero
// as none. Processes already in it are held to them from now on (memory
// past a lowered limit is reclaimed, or the OOM killer ends them).
func (m *NamedMachine) SetCgroupLimits(ctx context.Context, name string, limits CgroupLimits) error {
	start := agent.Start{Update: name, Limits: &limits}
	if err := start.Validate(); err != nil {
		return err
	}
	exit, err := m.session(ctx, start, agent.Streams{})
	if err != nil {
		return err
	}
	if exit.Error != "" {
		return fmt.Errorf("%s: %s", m.spec.Name, termsafe.Line(exit.Error))
	}
	return nil
}

// CgroupStats is a guest cgroup's use (agent.CgroupStats).
type CgroupStats = agent.CgroupStats

// limitedBuffer keeps at most max bytes written to it and notes more.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.over = true
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// CopyOut copies the file or tree at guestPath in the running machine to
// hostPath (into it when it is a directory), keeping modes and times. The
// stream is the guest's, so nothing lands outside the destination and no
// device node, setuid bit or foreign owner is created on the host.
func (m *NamedMachine) CopyOut(ctx context.Context, guestPath, hostPath string) error {
	dir, rename, err := tarcopy.Target(hostPath)
	if err != nil {
		return err
	}
	pr, pw, err := tarcopy.Pipe()
	if err != nil {
		return err
	}
	unpacked := make(chan error, 1)
	go func() {
		err := tarcopy.Unpack(pr, dir, tarcopy.Options{Rename: rename, Hostile: true})
		pr.Close() // a failed unpack stops the stream
		unpacked <- err
	}()
	exit, err := m.session(ctx, agent.Start{Copy: &agent.Copy{Out: true, Path: guestPath}}, agent.Streams{Stdout: pw})
	pw.Close()
	uerr := <-unpacked
	if err != nil {
		return err
	}
	if exit.Error != "" {
		return fmt.Errorf("%s:%s: %s", m.spec.Name, guestPath, termsafe.Line(exit.Error))
	}
	if uerr != nil {
		return fmt.Errorf("copying to %s: %w", hostPath, uerr)
	}
	return nil
}

// CopyIn copies the file or tree at hostPath into the running machine at
// guestPath (into it when it is a directory), keeping modes and times.
func (m *NamedMachine) CopyIn(ctx context.Context, hostPath, guestPath string) error {
	if _, err := os.Lstat(hostPath); err != nil {
		return err
	}
	pr, pw, err := tarcopy.Pipe()
	if err != nil {
		return err
	}
	packed := make(chan error, 1)
	go func() {
		packed <- tarcopy.Pack(pw, hostPath, filepath.Base(filepath.Clean(hostPath)))
		pw.Close()
	}()
	exit, err := m.session(ctx, agent.Start{Copy: &agent.Copy{Path: guestPath}}, agent.Streams{Stdin: pr})
	pr.Close()
	if perr := <-packed; err == nil && exit.Error == "" && perr != nil {
		return fmt.Errorf("reading %s: %w", hostPath, perr)
	}
	if err != nil {
		return err
	}
	if exit.Error != "" {
		return fmt.Errorf("%s:%s: %s", m.spec.Name, guestPath, termsafe.Line(exit.Error))
	}
	return nil
}

// InMemoryRoot is the image a machine in memory shows
// (MachineConfig.InMemory).
const InMemoryRoot = BuiltinRoot + " (in memory)"

// rootName is what a machine's status shows as its image.
func rootName(spec *machine.Spec) string {
	switch {
	case spec.InMemory:
		return InMemoryRoot
	case spec.Image != nil:
		return spec.Image.Ref
	}
	return ""
}

// image is the machine's image as startRequest wants it.
func (m *NamedMachine) image() *imagefs.Image {
	if m.spec.Image == nil {
		return nil
	}
	i := m.spec.Image
	return &imagefs.Image{Ref: i.Ref, Digest: i.Digest, Disk: i.Disk, Config: i.Config}
}

// Remove deletes the machine and everything of it under SMOL_HOME; a
// running machine only with force, which stops it hard first.
func (m *NamedMachine) Remove(ctx context.Context, force bool) error {
	name := m.spec.Name
	sl, err := m.lockStart()
	var starting *startingError
	if force && errors.As(err, &starting) {
		sl, err = m.endStart(ctx)
	}
	if err != nil {
		return err
	}
	defer sl.Unlock()
	if m.store.Alive(name) {
		if !force {
			return fmt.Errorf("machine %s is running; stop it first, or use rm -f", name)
		}
		if err := m.client().Stop(ctx, time.Millisecond); err != nil && !errors.Is(err, machine.ErrNoVMM) {
			return err
		}
		if err := m.waitGone(ctx); err != nil {
			return err
		}
	}
	return m.store.Remove(name)
}

// Logs copies the machine's console and agent log to w (the rotated
// older part first); with follow it keeps copying as the log grows until
// ctx ends.
func (m *NamedMachine) Logs(ctx context.Context, w io.Writer, follow bool) error {
	return followLog(ctx, w, m.store.Path(m.spec.Name, machine.ConsoleLog), follow)
}

// Events writes the machine's egress log (one JSON line per flow and per
// denied name, gateway.Event) to w, and with follow keeps writing as it
// grows until ctx ends.
func (m *NamedMachine) Events(ctx context.Context, w io.Writer, follow bool) error {
	return followLog(ctx, w, m.store.Path(m.spec.Name, machine.EgressLog), follow)
}

// followLog copies a rotating log (machine.RotatingLog: its predecessor
// first) to w, and with follow goes on copying as it grows or rotates.
func followLog(ctx context.Context, w io.Writer, path string, follow bool) error {
	if b, err := os.ReadFile(path + ".1"); err == nil {
		w.Write(b)
	}
	var off int64
	var ino uint64
	for {
		f, err := os.Open(path)
		if err == nil {
			var st syscall.Stat_t
			if syscall.Fstat(int(f.Fd()), &st) == nil {
				if st.Ino != ino || st.Size < off { // rotated: the new file from its start
					ino, off = st.Ino, 0
				}
			}
			f.Seek(off, io.SeekStart)
			n, _ := io.Copy(w, f)
			off += n
			f.Close()
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RemoveDamagedMachine removes the directory of a machine whose record
// cannot be read, unless a VMM still runs it.
func RemoveDamagedMachine(name string) error {
	st, err := machineStore()
	if err != nil {
		return err
	}
	if err := machine.ValidateName(name); err != nil {
		return err
	}
	if st.Alive(name) {
		return fmt.Errorf("machine %s: a VMM still runs it (pid file %s)", name, st.Path(name, machine.VMMLock))
	}
	return st.Remove(name)
}

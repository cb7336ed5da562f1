package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/log"
	"github.com/containerd/fifo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/machine"
)

// process is a container's init process or one of its execs: a command
// the guest agent runs in the container's root, with containerd's FIFOs
// as its stdio.
type process struct {
	containerID, execID string
	spec                *specs.Process
	root                guestRoot
	stdin, stdout       string // FIFO paths ("" for none)
	stderr              string
	terminal            bool

	signals chan syscall.Signal
	resize  chan smol.Winsize

	mu         sync.Mutex
	status     tasktypes.Status
	starting   bool // a Start has claimed it (claimStart) and not failed
	exitStatus uint32
	oomKilled  bool // the OOM killer ended a process of its container while it ran
	exitedAt   time.Time
	stdinPipe  io.Closer // closed by CloseIO
	done       chan struct{}
	// reported is closed once its Start has published the start event
	// (or failed): the exit event waits for it, so that containerd
	// never hears of an end before the start.
	reported     chan struct{}
	reportedOnce sync.Once
}

// guestRoot is a container's root as the guest runs its processes in it.
type guestRoot struct {
	path     string   // in the guest
	host     string   // on the host, where the guest's share shows it
	readOnly bool     // the spec's root.readonly
	writable []string // its mount points that stay writable when it is read-only
	dev      []string // its mount points below /dev, for its own /dev
	// pidNamespace names the guest PID namespace its processes run in
	// ("": the VM's); with ownPIDNamespace its init process starts it.
	pidNamespace    string
	ownPIDNamespace bool
	// masked and readOnlyPaths are the spec's linux.maskedPaths and
	// readonlyPaths.
	masked, readOnlyPaths []string
	// limits are the container's resources, set on its cgroup as its
	// init process starts (nil: none).
	limits *smol.CgroupLimits
}

func newProcess(containerID, execID string, root guestRoot, spec *specs.Process, stdin, stdout, stderr string, terminal bool) *process {
	return &process{containerID: containerID, execID: execID, spec: spec, root: root,
		stdin: stdin, stdout: stdout, stderr: stderr, terminal: terminal,
		signals: make(chan syscall.Signal, 8), resize: make(chan smol.Winsize, 4),
		status: tasktypes.StatusCreated, done: make(chan struct{}), reported: make(chan struct{})}
}

// claimStart reserves p for one Start: a second one, concurrent or
// later, is refused (it would run the command twice).
func (p *process) claimStart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != tasktypes.StatusCreated || p.starting {
		return fmt.Errorf("process %s%s: %w: already started", p.containerID, p.execID, errdefs.ErrFailedPrecondition)
	}
	p.starting = true
	return nil
}

// startFailed gives p back to the created state after a failed Start,
// if that ran nothing (a command that runs keeps its claim).
func (p *process) startFailed() {
	p.mu.Lock()
	if p.status == tasktypes.StatusCreated {
		p.starting = false
	}
	p.mu.Unlock()
}

// startInProgress tells whether a Start has claimed p and not yet run it.
func (p *process) startInProgress() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starting && p.status == tasktypes.StatusCreated
}

// startReported says that p's Start has published its event (or failed).
func (p *process) startReported() { p.reportedOnce.Do(func() { close(p.reported) }) }

// command is what the agent runs for p.
func (p *process) command() smol.Command {
	s := p.spec
	c := smol.Command{Args: s.Args, Env: s.Env, Dir: s.Cwd, Root: p.root.path, ReadOnlyRoot: p.root.readOnly, DevMounts: p.root.dev, TTY: p.terminal || s.Terminal,
		User:   strconv.FormatUint(uint64(s.User.UID), 10) + ":" + strconv.FormatUint(uint64(s.User.GID), 10),
		Groups: s.User.AdditionalGids, Capabilities: capabilities(s.Capabilities), NoNewPrivileges: s.NoNewPrivileges,
		Signals: p.signals, Resize: p.resize}
	if p.root.readOnly {
		c.WritablePaths = p.root.writable
	}
	c.MaskedPaths, c.ReadOnlyPaths = p.root.masked, p.root.readOnlyPaths
	c.PIDNamespace, c.NewPIDNamespace = p.root.pidNamespace, p.root.ownPIDNamespace && p.execID == ""
	c.Cgroup = p.containerID // every process of a container, for Stats and its limits
	if p.execID == "" {
		c.Limits = p.root.limits
	}
	if s.ConsoleSize != nil {
		c.Rows, c.Cols = uint16(s.ConsoleSize.Height), uint16(s.ConsoleSize.Width)
	}
	p.root.lookUp(&c)
	return c
}

// capabilities are the OCI process's capability sets by number; a name
// this build does not know is left out, as runc does with a warning.
func capabilities(c *specs.LinuxCapabilities) *smol.Capabilities {
	if c == nil {
		return nil
	}
	numbers := func(names []string) []uint8 {
		var out []uint8
		for _, name := range names {
			if n, ok := agent.CapabilityNumber(name); ok {
				out = append(out, n)
			}
		}
		return out
	}
	return &smol.Capabilities{Bounding: numbers(c.Bounding), Effective: numbers(c.Effective),
		Inheritable: numbers(c.Inheritable), Permitted: numbers(c.Permitted), Ambient: numbers(c.Ambient)}
}

// start opens the FIFOs and runs the command in m once booted says m
// runs; exited is called with the exit status when it ends (255 if m never
// ran). With untilRunning it returns once the command's program runs in
// the guest (or has already ended, its status reported through exited),
// as runc's start does: a client that execs into the container or reads
// its processes right after finds them.
func (p *process) start(ctx context.Context, m *smol.NamedMachine, booted func(context.Context) error, exited func(*process), untilRunning bool) error {
	cmd := p.command()
	running := make(chan struct{})
	cmd.Started = func() { close(running) } // once at most (agent.Run)
	var closers []io.Closer
	open := func(path string, flag int) (io.ReadWriteCloser, error) {
		f, err := fifo.OpenFifo(ctx, path, flag, 0)
		if err == nil {
			closers = append(closers, f)
		}
		return f, err
	}
	if p.stdout != "" {
		f, err := open(p.stdout, syscall.O_WRONLY)
		if err != nil {
			return err
		}
		cmd.Stdout = f
	}
	if p.stderr != "" && !cmd.TTY {
		f, err := open(p.stderr, syscall.O_WRONLY)
		if err != nil {
			closeAll(closers)
			return err
		}
		cmd.Stderr = f
	}
	if p.stdin != "" {
		f, err := open(p.stdin, syscall.O_RDONLY|syscall.O_NONBLOCK)
		if err != nil {
			closeAll(closers)
			return err
		}
		// CloseIO ends the command's stdin without waiting for the
		// client to close its end.
		pr, pw := io.Pipe()
		go func() { io.Copy(pw, f); pw.Close() }()
		// Closed once the command ended (closeAll): a copy still
		// holding input nobody will read then fails instead of
		// blocking forever.
		closers = append(closers, pr)
		cmd.Stdin = pr
		p.mu.Lock()
		p.stdinPipe = pw
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.status = tasktypes.StatusRunning
	p.mu.Unlock()
	go func() {
		ctx := context.WithoutCancel(ctx)
		var st smol.ExitStatus
		err := booted(ctx)
		if err == nil {
			st, err = m.Run(ctx, cmd)
		}
		code := st.Code
		var ce *smol.CommandError
		switch {
		case errors.As(err, &ce):
			// It could not start: why goes where its output goes (the
			// container's log) and to the shim's log, as runc reports
			// a failed exec.
			code = ce.Code
			if w := first(cmd.Stderr, cmd.Stdout); w != nil {
				fmt.Fprintf(w, "smol: %s\n", ce.Error())
			}
			log.G(ctx).WithField("id", p.containerID).WithField("exec", p.execID).WithField("exitStatus", code).
				Error("smol: the process could not start: " + ce.Error())
		case err != nil:
			code = 255 // the machine failed under it
			entry := log.G(ctx).WithError(err).WithField("id", p.containerID).WithField("exec", p.execID)
			if m != nil { // nil: removed (Shutdown) before this start
				if st, serr := settledStatus(ctx, m); serr == nil { // why, when the machine is what ended
					entry = entry.WithField("machine", st.State).WithField("machineError", st.Error).WithField("console", st.LastConsole)
				}
			}
			entry.Error("smol: the process ended without an exit status")
		}
		closeAll(closers)
		p.mu.Lock()
		p.status, p.exitStatus, p.exitedAt = tasktypes.StatusStopped, uint32(code), time.Now()
		p.oomKilled = st.OOMKilled
		p.mu.Unlock()
		close(p.done)
		<-p.reported
		exited(p)
	}()
	if !untilRunning {
		return nil
	}
	select {
	case <-running:
	case <-p.done:
	case <-ctx.Done():
		// The client gave up on this start: the command must not run
		// on as if it had succeeded. It is killed (at once, or as soon
		// as it reaches the guest); its end is reported as any end.
		p.kill(syscall.SIGKILL)
		return fmt.Errorf("process %s%s: started, but not seen running: %w", p.containerID, p.execID, ctx.Err())
	}
	return nil
}

// first is the first of ws that is set.
func first(ws ...io.Writer) io.Writer {
	for _, w := range ws {
		if w != nil {
			return w
		}
	}
	return nil
}

// settledStatus is m's status once it has settled: a VMM whose guest died
// cuts the agent's sessions a moment before it records the machine as
// failed, and a status read at once would still say running. It waits at
// most a few seconds for a machine that really does run on.
func settledStatus(ctx context.Context, m *smol.NamedMachine) (smol.MachineStatus, error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		st, err := m.Status(ctx)
		if err != nil || (st.State != machine.Running && st.State != machine.Paused) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}

// kill delivers a signal to a running process.
func (p *process) kill(sig syscall.Signal) bool {
	p.mu.Lock()
	running := p.status == tasktypes.StatusRunning
	p.mu.Unlock()
	if !running {
		return false
	}
	select {
	case p.signals <- sig:
	default: // signals already queued; this one is dropped as a real queue full of them would coalesce
	}
	return true
}

// state reports p's status and exit.
func (p *process) state() (tasktypes.Status, uint32, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, p.exitStatus, p.exitedAt
}

// closeStdin ends the command's stdin.
func (p *process) closeStdin() {
	p.mu.Lock()
	c := p.stdinPipe
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

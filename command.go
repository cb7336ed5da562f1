package smol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/internal/syncbuf"
	"github.com/smolvm/smol/internal/termsafe"
)

// Command is a program for the guest agent to run, with its streams.
type Command struct {
	// Args replaces the image's CMD (its ENTRYPOINT stays in front, as
	// with docker run); nil runs ENTRYPOINT and CMD as the image says.
	Args []string
	Env  []string // KEY=VALUE, after (and overriding) the image's ENV
	Dir  string   // working directory; "" means the image's WORKDIR, else /
	User string   // USER[:GROUP] or UID[:GID]; "" means the image's USER, else root
	// Root runs the command chrooted in this guest directory (a volume
	// holding a container's root filesystem: the containerd shim's); ""
	// is the machine's own root.
	Root string
	// ReadOnlyRoot makes Root read-only for the command.
	ReadOnlyRoot bool
	// Path, with Root, is the program Args[0] names, found already in
	// Root and the command's PATH (package rootlookup, on a host that
	// can read the root): an absolute path in Root. The guest then only
	// checks it; "" has the guest search PATH itself.
	Path string
	// WritablePaths, with ReadOnlyRoot, are the paths under Root (as the
	// command sees them) that stay writable: the container's volumes.
	WritablePaths []string
	// DevMounts are the paths below /dev in Root where the host mounted
	// something (a volume, kubelet's /dev/termination-log): the command's
	// own /dev, which covers them, has them too.
	DevMounts []string
	// MaskedPaths and ReadOnlyPaths are paths under Root hidden (a file
	// empty, a directory empty and read-only) or made read-only: an OCI
	// container's linux.maskedPaths and readonlyPaths. The first command
	// in a root decides them.
	MaskedPaths, ReadOnlyPaths []string
	// PIDNamespace, if set, names the PID namespace (in the guest) the
	// command runs in, which needs a Root; "" is the guest's own. With
	// NewPIDNamespace the command starts it as its PID 1, and everything
	// left in it ends with that command; otherwise it joins the one a
	// command already started (or is starting) under that name.
	PIDNamespace    string
	NewPIDNamespace bool
	// Cgroup, if set, names the guest cgroup the command runs in, made if
	// missing (a container's): NamedMachine.CgroupStats reports its use.
	Cgroup string
	// Limits, with Cgroup, are set on the cgroup before the command
	// starts (all of them; zero is none): a container's resources.
	// NamedMachine.SetCgroupLimits changes them later.
	Limits *CgroupLimits
	// Groups, if set, are the command's supplementary groups exactly; nil
	// takes the user's from the image's /etc/group.
	Groups []uint32
	// Capabilities, if set, are the command's capability sets exactly;
	// nil gives it its user's (all of them for root).
	Capabilities *Capabilities
	// NoNewPrivileges sets the command's no_new_privs bit: no execve
	// under it gains privileges (setuid bits, file capabilities).
	NoNewPrivileges bool

	// TTY runs the command on a terminal of Rows x Cols in the guest; its
	// output then all arrives on Stdout.
	TTY        bool
	Rows, Cols uint16

	Stdin          io.Reader // nil: the command's stdin is empty
	Stdout, Stderr io.Writer // nil discards
	// Signals are delivered to the command (to its process group with
	// TTY) while it runs.
	Signals <-chan syscall.Signal
	// Resize carries new terminal sizes.
	Resize <-chan Winsize
	// Started, if set, is called once the command's own program runs in
	// the guest (past its execve, after any set-up of its namespace and
	// credentials), before it returns; never for a command that could
	// not start.
	Started func()
}

// Winsize is a terminal size in characters.
type Winsize = agent.Winsize

// CgroupLimits are a guest cgroup's memory, process and CPU limits.
type CgroupLimits = agent.CgroupLimits

// Capabilities are a command's Linux capability sets, by number
// (agent.CapabilityNumber maps OCI names).
type Capabilities = agent.Capabilities

// CommandError is a command that could not be started in the guest (not
// found, bad user, missing working directory); Code is the status a shell
// gives for it (126 or 127).
type CommandError struct {
	Code int
	// Msg is the guest agent's reason, exactly as it sent it: guest text,
	// which may hold terminal escape sequences. Error escapes it.
	Msg string
}

// Error returns Msg escaped (termsafe.Line), since error strings end up on
// terminals and a hostile guest chooses Msg.
func (e *CommandError) Error() string { return termsafe.Line(e.Msg) }

// agentBootTimeout bounds the wait for the agent's first connection.
// Generous: the box runs guests under a software CPU.
const agentBootTimeout = 2 * time.Minute

// RunCommand boots a VM whose root filesystem is image (nil: the busybox
// root inside the agent's initramfs), runs cmd in it through the guest
// agent, and returns the command's exit status once the VM has powered off.
// cfg describes the VM as for Start; its Initrd defaults to the agent's
// (DefaultAgentInitrd) and it must not ask for a vsock device, which the
// agent uses. Canceling ctx stops the VM.
func RunCommand(ctx context.Context, cfg Config, image *imagefs.Image, cmd Command) (int, error) {
	start, err := startRequest(image, cmd)
	if err != nil {
		return 0, err
	}
	if cfg.Vsock != nil {
		return 0, errors.New("a command's VM uses its vsock device for the guest agent; leave Config.Vsock unset")
	}
	if cfg.Initrd == "" {
		if cfg.Initrd, err = DefaultAgentInitrd(); err != nil {
			return 0, err
		}
	}
	if image != nil {
		cfg.Disks = append([]Disk{{Path: image.Disk, ReadOnly: true, Serial: "smol-root"}}, cfg.Disks...)
		cfg.Cmdline += " smol.root=/dev/vda"
	}
	// Keep the console's end, besides giving it to the caller who wants
	// it: it is the only clue when the guest fails before the agent
	// reports.
	console := syncbuf.NewTail(16 << 10)
	if cfg.Console == nil {
		cfg.Console = console
	} else {
		cfg.Console = io.MultiWriter(console, cfg.Console)
	}

	dir, err := os.MkdirTemp("", "smol-vsock-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	cfg.Vsock = &Vsock{Path: filepath.Join(dir, "v.sock")}
	l, err := net.Listen("unix", fmt.Sprintf("%s_%d", cfg.Vsock.Path, agent.BootPort))
	if err != nil {
		return 0, err
	}
	defer l.Close()

	m, err := Start(cfg)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	stopOnCancel := context.AfterFunc(ctx, m.Stop)
	defer stopOnCancel()

	conn, err := acceptAgent(l, m)
	if err != nil {
		return 0, guestFailure(m, err, console)
	}
	hangUp := hangUpWhenStopped(conn, m.Done())
	exit, err := agent.Run(conn, start, agent.Streams{
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		Signals: cmd.Signals, Resize: cmd.Resize, Started: cmd.Started,
	})
	hangUp()
	conn.Close() // the agent powers off once the host hung up
	if err != nil {
		return 0, guestFailure(m, commandCut(m, err), console)
	}
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		m.Stop() // the command is done; a guest slow to power off is cut
	}
	if _, err := m.Wait(); err != nil && ctx.Err() == nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if exit.Error != "" {
		return exit.Code, &CommandError{Code: exit.Code, Msg: exit.Error}
	}
	return exit.Code, nil
}

// startRequest merges the image's configuration and the command.
func startRequest(image *imagefs.Image, cmd Command) (agent.Start, error) {
	var ic imagefs.Config
	if image != nil {
		ic = image.Config
	}
	args := cmd.Args
	if args == nil {
		args = ic.Cmd
	}
	args = append(append([]string(nil), ic.Entrypoint...), args...)
	if len(args) == 0 {
		return agent.Start{}, errors.New("no command: the image has no ENTRYPOINT or CMD; give one after --")
	}
	s := agent.Start{
		Args: args,
		Env:  append(append([]string(nil), ic.Env...), cmd.Env...),
		Dir:  first(cmd.Dir, ic.WorkingDir),
		User: first(cmd.User, ic.User),
		Root: cmd.Root, Path: cmd.Path, ReadOnlyRoot: cmd.ReadOnlyRoot, WritablePaths: cmd.WritablePaths, DevMounts: cmd.DevMounts,
		MaskedPaths: cmd.MaskedPaths, ReadOnlyPaths: cmd.ReadOnlyPaths,
		PIDNamespace: cmd.PIDNamespace, NewPIDNamespace: cmd.NewPIDNamespace, Cgroup: cmd.Cgroup, Limits: cmd.Limits, Groups: cmd.Groups, Capabilities: cmd.Capabilities, NoNewPrivileges: cmd.NoNewPrivileges,
		TTY: cmd.TTY, Rows: cmd.Rows, Cols: cmd.Cols,
		PowerOff: true,
	}
	return s, s.Validate()
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// acceptAgent waits for the agent's connection, or for the VM to end.
func acceptAgent(l net.Listener, m *Machine) (net.Conn, error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := l.Accept()
		ch <- accepted{c, err}
	}()
	select {
	case a := <-ch:
		return a.c, a.err
	case <-m.Done():
		exit, err := m.Wait()
		if err != nil {
			return nil, fmt.Errorf("the VM ended before its agent started: %w", err)
		}
		return nil, fmt.Errorf("the VM ended (%s) before its agent started", exit.Reason)
	case <-time.After(agentBootTimeout):
		// The guest kernel boots quietly, so its console rarely says
		// where it stopped: what its vCPUs and devices did over a
		// second tells a guest stuck in KVM_RUN from one idling with an
		// interrupt lost.
		err := fmt.Errorf("the guest agent did not start within %v", agentBootTimeout)
		if activity := m.vm.GuestActivity(time.Second); activity != "" {
			err = fmt.Errorf("%w; the guest %s", err, activity)
		}
		return nil, err
	}
}

// agentDrainTime is how long a session with a VM that stopped may still
// read what the VM passed on before it stopped.
const agentDrainTime = time.Second

// hangUpWhenStopped ends a session with the agent once its VM has
// stopped: a guest that dies mid-command (a crash, a triple fault) sends
// no end of its own, and the vsock device's host side of the connection
// stays open until the VM is closed, so without this the session would
// wait for the agent forever. The bytes already passed on can still be
// read for agentDrainTime. Call the returned function when the session
// is over.
func hangUpWhenStopped(conn net.Conn, stopped <-chan struct{}) (over func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-stopped:
			select {
			case <-done: // over already: both were ready
			default:
				conn.SetDeadline(time.Now().Add(agentDrainTime))
			}
		case <-done:
		}
	}()
	return func() { close(done); <-exited }
}

// guestFailure describes a VM that failed around its agent, with the end
// of its console when there is one.
func guestFailure(m *Machine, err error, console *syncbuf.Tail) error {
	select {
	case <-m.Done():
	case <-time.After(2 * time.Second):
		m.Stop()
	}
	if _, crash := m.Wait(); crash != nil {
		err = crash
	}
	return withConsoleTail(err, console)
}

// commandCut says what became of the VM when the session with its agent
// broke: it stopped by itself (a crash names itself in guestFailure), or
// it still runs, so the agent or the connection failed, not the guest.
// A guest that powers off or resets can close its connections a moment
// before its vCPUs stop, so it waits up to vmEndWait to learn which.
func commandCut(m *Machine, err error) error {
	select {
	case <-m.Done():
		if exit, crash := m.Wait(); crash == nil {
			return fmt.Errorf("the VM stopped (%s) before its agent ended the command: %w", exit.Reason, err)
		}
		return err
	case <-time.After(vmEndWait):
		return fmt.Errorf("%w (the VM still ran)", err)
	}
}

// vmEndWait is how long a broken session waits to learn whether its VM
// stopped.
const vmEndWait = time.Second

// withConsoleTail adds the end of the guest's console to err, if there is
// one. The guest wrote it, so it is escaped: it cannot drive the terminal
// the error is printed on.
func withConsoleTail(err error, console *syncbuf.Tail) error {
	if console != nil {
		if tail := console.String(); tail != "" {
			return fmt.Errorf("%w; guest console ends with:\n%s", err, termsafe.Text(tail))
		}
	}
	return err
}

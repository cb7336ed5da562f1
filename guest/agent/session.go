package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/guest/pid1"
	"github.com/smolvm/smol/internal/rootlookup"
	"golang.org/x/sys/unix"
)

// session is one command on one vsock connection.
type session struct {
	conn   *os.File
	reaper *pid1.Reaper
	w      *agent.Writer
}

// outputGrace bounds how long output is still relayed after the command
// exited: a background process it left behind may hold its stdout open
// forever.
const outputGrace = 2 * time.Second

// hangUpWait bounds how long a session waits, after the exit frame, for
// the host to hang up. The host does so as soon as it has read the frame;
// the bound is for a host that never does, and is long, since a guest
// that powers off before a slow host has the frame loses the exit.
const hangUpWait = 10 * time.Second

// serve reads the Start frame, runs the command, relays its streams and
// sends its Exit. It returns the Start (zero if none arrived) once the host
// has closed the connection or a short wait for that has passed.
func (s *session) serve() agent.Start {
	defer s.conn.Close()
	s.w = agent.NewWriter(s.conn)
	r := agent.NewReader(s.conn)
	f, err := r.Read()
	if err != nil || f.Type != agent.FrameStart {
		logf("session: no start frame (%v)", err)
		return agent.Start{}
	}
	start, err := agent.DecodeStart(f.Payload)
	if err != nil {
		s.exit(agent.Exit{Code: 126, Error: err.Error()})
		return start
	}
	if start.Identity != nil {
		if err := applyIdentity(start.Identity); err != nil {
			s.exit(agent.Exit{Code: 126, Error: err.Error()})
			return start
		}
		if start.Identity.SyncClock {
			if err := s.syncClock(r); err != nil {
				s.exit(agent.Exit{Code: 126, Error: "setting the clock from the host's: " + err.Error()})
				return start
			}
		}
	}
	if start.Hostname != "" {
		unix.Sethostname([]byte(start.Hostname))
	}
	if start.Idle {
		s.exit(agent.Exit{})
	} else if start.Copy != nil {
		s.exit(s.copy(start.Copy, r))
	} else if start.Stats != "" {
		s.exit(s.stats(start.Stats))
	} else if start.Update != "" {
		s.exit(s.update(start.Update, start.Limits))
	} else {
		s.exit(s.run(start, r))
	}
	// Wait for the host to read the exit and hang up, so that powering
	// off cannot overtake the frame still in flight.
	s.conn.SetReadDeadline(time.Now().Add(hangUpWait))
	io.Copy(io.Discard, s.conn)
	return start
}

func (s *session) exit(e agent.Exit) {
	payload, _ := json.Marshal(e)
	s.w.Write(agent.FrameExit, payload)
}

// run starts the command and relays until it ended.
func (s *session) run(start agent.Start, r *agent.Reader) agent.Exit {
	proc, err := prepare(start)
	if err != nil {
		var se *startError
		if errors.As(err, &se) {
			return agent.Exit{Code: se.code, Error: se.msg}
		}
		return agent.Exit{Code: 126, Error: err.Error()}
	}
	defer proc.release()
	if start.Limits != nil {
		if err := setLimits(start.Cgroup, start.Limits); err != nil {
			return agent.Exit{Code: 126, Error: err.Error()}
		}
	}
	var oomBefore uint64
	if start.Cgroup != "" {
		fd, err := openCgroup(start.Cgroup)
		if err != nil {
			return agent.Exit{Code: 126, Error: err.Error()}
		}
		defer unix.Close(fd) // once started: clone3 has placed it
		proc.cmd.SysProcAttr.UseCgroupFD, proc.cmd.SysProcAttr.CgroupFD = true, fd
		oomBefore = oomKills(start.Cgroup)
	}
	var stdio *stdio
	if start.TTY {
		stdio, err = newTTYStdio(start.Rows, start.Cols)
	} else {
		stdio, err = newPipeStdio()
	}
	if err != nil {
		return agent.Exit{Code: 126, Error: err.Error()}
	}
	defer stdio.close()
	proc.cmd.Stdin, proc.cmd.Stdout, proc.cmd.Stderr = stdio.child[0], stdio.child[1], stdio.child[2]
	if start.TTY {
		proc.cmd.SysProcAttr.Setctty = true
		proc.cmd.SysProcAttr.Ctty = 0
	}
	status, ns, err := s.start(start, proc)
	if err != nil {
		return agent.Exit{Code: 126, Error: fmt.Sprintf("%s: %v", start.Args[0], err)}
	}
	if ns != nil {
		defer ns.end(errNamespaceEnded) // after the exit: the kernel has killed what was left in it
	}
	// The reaper waits for it; the handle stays for signals (a pidfd,
	// which cannot reach a process that reused the pid).
	defer proc.cmd.Process.Release()
	stdio.closeChildEnds()

	var relays sync.WaitGroup
	relays.Add(1)
	go func() {
		defer relays.Done()
		s.w.Pipe(agent.FrameStdout, stdio.stdout)
	}()
	if stdio.stderr != nil {
		relays.Add(1)
		go func() {
			defer relays.Done()
			s.w.Pipe(agent.FrameStderr, stdio.stderr)
		}()
	}
	go s.control(r, stdio, proc.cmd.Process, proc.cmd.Process.Pid, start.TTY)
	if proc.execed() {
		s.w.Write(agent.FrameStarted, nil)
	}

	ws := <-status
	drained := make(chan struct{})
	go func() { relays.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
	}
	exit := agent.Exit{Code: ws.ExitStatus()}
	if ws.Signaled() {
		exit = agent.Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	exit.OOMKilled = start.Cgroup != "" && oomKills(start.Cgroup) > oomBefore
	return exit
}

// start starts proc in its PID namespace: the guest's, a new one it is
// PID 1 of (returned, to be ended when proc ends), or one it joins.
func (s *session) start(start agent.Start, proc *process) (<-chan unix.WaitStatus, *pidNamespace, error) {
	var status <-chan unix.WaitStatus
	// startCmd starts the command; with nsFD it also opens the command's
	// PID namespace, under the reaper's lock: the command cannot have
	// been reaped, nor its pid reused, by then.
	startCmd := func(nsFD *int) error {
		var err error
		status, _, err = s.reaper.Start(func() (int, error) {
			err := proc.cmd.Start()
			if proc.launch != nil {
				proc.launch.started()
			}
			if err != nil {
				return 0, err
			}
			pid := proc.cmd.Process.Pid
			if nsFD != nil {
				if *nsFD, err = openPIDNamespace(pid); err != nil {
					proc.cmd.Process.Kill() // reaped with the others: it has no waiter
					proc.cmd.Process.Release()
					return 0, err
				}
			}
			return pid, nil
		})
		return err
	}
	switch {
	case start.NewPIDNamespace:
		ns, err := claimPIDNamespace(start.PIDNamespace)
		if err != nil {
			return nil, nil, err
		}
		nsFD := -1
		err = startCmd(&nsFD)
		ns.start(nsFD, err)
		if err != nil {
			return nil, nil, err
		}
		return status, ns, nil
	case start.PIDNamespace != "":
		fd, err := joinPIDNamespace(start.PIDNamespace)
		if err != nil {
			return nil, nil, err
		}
		defer unix.Close(fd)
		err = inPIDNamespace(fd, func() error { return startCmd(nil) })
		return status, nil, err
	default:
		err := startCmd(nil)
		return status, nil, err
	}
}

// control applies the host's stdin, signal and resize frames.
func (s *session) control(r *agent.Reader, io *stdio, proc *os.Process, pid int, tty bool) {
	for {
		f, err := r.Read()
		if err != nil {
			io.closeStdin()
			return
		}
		switch f.Type {
		case agent.FrameStdin:
			if _, err := io.stdin.Write(f.Payload); err != nil {
				io.closeStdin()
			}
		case agent.FrameStdinClose:
			if tty {
				io.stdin.Write([]byte{4}) // ^D: end of input on a terminal
			} else {
				io.closeStdin()
			}
		case agent.FrameSignal:
			if len(f.Payload) == 1 && f.Payload[0] > 0 && f.Payload[0] < 65 {
				signal(proc, pid, syscall.Signal(f.Payload[0]), tty)
			}
		case agent.FrameResize:
			if ws, err := agent.DecodeResize(f.Payload); err == nil && io.resize != nil {
				io.resize(ws)
			}
		}
	}
}

// signal sends sig to the command (proc, whose pid was pid at its start),
// or with a terminal to its whole process group, while the command has not
// been reaped: a frame that arrives after its end reaches nothing.
func signal(proc *os.Process, pid int, sig syscall.Signal, tty bool) {
	if !tty {
		proc.Signal(sig) // through its pidfd
		return
	}
	// Unreaped (alive or a zombie), the leader holds its pid, so no
	// other group can have that number. The reaper can act between the
	// check and the kill, a window of one system call. (pid is the one
	// read at the start: a released handle's Pid is -1, and kill(1)
	// would signal the agent.)
	if pid > 1 && proc.Signal(syscall.Signal(0)) == nil {
		unix.Kill(-pid, sig)
	}
}

// process is a command ready to start.
type process struct {
	cmd      *exec.Cmd
	launch   *launch // the launcher cmd starts through, if any
	prefetch func()  // releases the program's read-ahead pages (prefetch)
}

// release frees what the process held to start, once it has ended.
func (p *process) release() {
	p.prefetch()
	if p.launch != nil {
		p.launch.close()
	}
}

// execed waits until the command's own program runs (a launcher has
// exec'd it) and says whether it does. Called after cmd.Start succeeded.
func (p *process) execed() bool {
	if p.launch == nil {
		return true // cmd.Start returns once the program is exec'd
	}
	return p.launch.execed()
}

// commandUser is who start runs as. A numeric UID:GID with its groups
// given and HOME in its environment (an OCI process's user: containerd
// resolved it on the host, and the shim HOME) needs nothing from the
// root's account files, so none is read: on a container's 9P root each
// read costs the guest round trips at every start.
func commandUser(start agent.Start, rootFD int) (rootlookup.User, error) {
	uid, gid, numeric := rootlookup.NumericIDs(start.User)
	if home := rootlookup.EnvValue(start.Env, "HOME"); numeric && start.Groups != nil && home != "" {
		return rootlookup.User{UID: uid, GID: gid, Groups: start.Groups, Home: home}, nil
	}
	return rootlookup.LookupUser(start.User, start.Groups, rootFD)
}

// startError is a command that cannot start, with the shell's status for it.
type startError struct {
	code int
	msg  string
}

func (e *startError) Error() string { return e.msg }

// prepare resolves the user, environment, directory and program of start.
// With start.Root the command runs chrooted there (a container's root
// shared from the host), its user, directory and program found in it.
// The program's first pages are read ahead (prefetch) while the rest is
// set up: the process releases them once the command has ended.
func prepare(start agent.Start) (*process, error) {
	root := start.Root
	rootDir := root
	if rootDir == "" {
		rootDir = "/"
	}
	rootFD, err := unix.Open(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &startError{126, fmt.Sprintf("root %s: %v", rootDir, err)}
	}
	defer unix.Close(rootFD)
	u, err := commandUser(start, rootFD)
	if err != nil {
		return nil, &startError{126, err.Error()}
	}
	env := defaultEnv(start.Env, u, start.TTY)
	dir := start.Dir
	if dir == "" {
		dir = "/"
	}
	if !rootlookup.IsDir(rootFD, dir) {
		return nil, &startError{126, fmt.Sprintf("working directory %s does not exist", dir)}
	}
	path := start.Path
	if path == "" || rootlookup.Executable(rootFD, path) != nil {
		// Not found by the host, or no longer there: searched here, so
		// that a failure reads as it always does.
		if path, err = rootlookup.LookPath(start.Args[0], rootlookup.EnvValue(env, "PATH"), dir, rootFD); err != nil {
			return nil, &startError{127, err.Error()}
		}
	}
	proc := &process{prefetch: func() {}}
	if root != "" {
		// A container's root is on a 9P share that caches nothing
		// (prefetch); the guest's own root keeps its page cache.
		proc.prefetch = prefetch(rootFD, path)
		if err := prepareRoot(root, start); err != nil {
			proc.release()
			return nil, &startError{126, err.Error()}
		}
	}
	cmd := &exec.Cmd{Path: path, Args: start.Args, Env: env, Dir: dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Chroot:     root,
		Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups},
	}
	mountProc := start.PIDNamespace != "" && procNeeded(root, start.PIDNamespace)
	if start.Capabilities != nil || start.NoNewPrivileges || mountProc {
		var masks *procMasks
		if mountProc {
			masks = &procMasks{Masked: underProc(start.MaskedPaths), ReadOnly: underProc(start.ReadOnlyPaths)}
		}
		l, err := useLauncher(cmd, start.Capabilities, start.NoNewPrivileges, masks)
		if err != nil {
			proc.release()
			return nil, &startError{126, err.Error()}
		}
		proc.launch = l
	}
	if start.NewPIDNamespace {
		cmd.SysProcAttr.Cloneflags = unix.CLONE_NEWPID
	}
	proc.cmd = cmd
	return proc, nil
}

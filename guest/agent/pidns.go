package main

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// PID namespaces of containers, as OCI runtimes give them: a container's
// first command starts one (Start.NewPIDNamespace) and is its PID 1; the
// container's later commands, or a pod's other containers sharing its
// namespace, join it. The host names each namespace; the agent holds it
// open through its first command's /proc/PID/ns/pid from that command's
// start to its end, when the kernel kills whatever is left in it.
//
// A join can arrive before the start it depends on: the host starts a
// pod's sandbox and its first container on separate connections, at
// once. So a join waits for the namespace's start, for at most
// pidNamespaceWait, instead of failing on an order the host does not
// control.

// pidNamespaceWait bounds how long a command waits for the namespace it
// joins to be started.
const pidNamespaceWait = 30 * time.Second

// pidNamespace is one named namespace, from the first mention of its name
// to its PID 1's end.
type pidNamespace struct {
	name    string
	started chan struct{} // closed once its first command started, or failed to
	claimed bool          // a command is starting it
	fd      int           // its nsfs file once started; -1 before and after
	ended   bool          // its PID 1 ended, or never started: joins fail at once
	err     error         // why it has no fd: never started, or ended
}

var pidNamespaces = struct {
	sync.Mutex
	byName map[string]*pidNamespace
}{byName: map[string]*pidNamespace{}}

// namespaceLocked returns name's entry, made if missing (lock held).
func namespaceLocked(name string) *pidNamespace {
	ns := pidNamespaces.byName[name]
	if ns == nil {
		ns = &pidNamespace{name: name, started: make(chan struct{}), fd: -1}
		pidNamespaces.byName[name] = ns
	}
	return ns
}

// claimPIDNamespace reserves name for a command that starts it.
func claimPIDNamespace(name string) (*pidNamespace, error) {
	pidNamespaces.Lock()
	defer pidNamespaces.Unlock()
	ns := namespaceLocked(name)
	if ns.ended { // a name used again after its namespace ended
		delete(pidNamespaces.byName, name)
		ns = namespaceLocked(name)
	}
	if ns.claimed {
		return nil, fmt.Errorf("PID namespace %s is already running", name)
	}
	ns.claimed = true
	return ns, nil
}

// openPIDNamespace opens the PID namespace of process pid (in the agent's
// namespace). The caller opens it before the process can be reaped, so
// that the pid cannot name another process by then.
func openPIDNamespace(pid int) (int, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("its PID namespace: %w", err)
	}
	return fd, nil
}

// start records the start of ns's first command: fd is its namespace
// (openPIDNamespace), which ns owns from now on, or err why it did not
// start.
func (ns *pidNamespace) start(fd int, err error) {
	if err != nil {
		ns.end(fmt.Errorf("its first command did not start: %w", err))
	} else {
		pidNamespaces.Lock()
		ns.fd = fd
		pidNamespaces.Unlock()
	}
	close(ns.started)
}

// end records that ns's PID 1 ended (or never started): joins fail with
// why from now on, at once, until the name is started again.
func (ns *pidNamespace) end(why error) {
	pidNamespaces.Lock()
	defer pidNamespaces.Unlock()
	ns.ended = true
	if ns.fd >= 0 {
		unix.Close(ns.fd)
		ns.fd = -1
	}
	if ns.err == nil {
		ns.err = why
	}
}

// errNamespaceEnded is a join of a namespace whose PID 1 has ended.
var errNamespaceEnded = errors.New("it has ended (its first command exited)")

// joinPIDNamespace returns a descriptor of name's namespace (the caller
// closes it), once started.
func joinPIDNamespace(name string) (int, error) {
	pidNamespaces.Lock()
	ns := namespaceLocked(name)
	pidNamespaces.Unlock()
	select {
	case <-ns.started:
	case <-time.After(pidNamespaceWait):
		pidNamespaces.Lock()
		if !ns.claimed && pidNamespaces.byName[name] == ns {
			delete(pidNamespaces.byName, name) // nobody is starting it
		}
		pidNamespaces.Unlock()
		return -1, fmt.Errorf("PID namespace %s: nothing started it within %v", name, pidNamespaceWait)
	}
	pidNamespaces.Lock()
	defer pidNamespaces.Unlock()
	if ns.fd < 0 {
		return -1, fmt.Errorf("PID namespace %s: %w", name, ns.err)
	}
	fd, err := unix.FcntlInt(uintptr(ns.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("PID namespace %s: %w", name, err)
	}
	return fd, nil
}

// inPIDNamespace runs start on a thread whose children are born in the
// namespace nsFD: setns(CLONE_NEWPID) changes only the calling thread's
// namespace for children, so start runs on a locked thread of its own,
// which is not given back to Go's scheduler afterwards (it ends with its
// goroutine).
func inPIDNamespace(nsFD int, start func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if err := unix.Setns(nsFD, unix.CLONE_NEWPID); err != nil {
			done <- fmt.Errorf("enter its PID namespace: %w", err)
			return
		}
		done <- start()
	}()
	return <-done
}

// procShows is, per command root, the PID namespace its /proc was last
// mounted for: a root's first command in a namespace mounts the
// namespace's /proc over it (launchSpec.Proc), from inside, as only
// a process in the namespace can.
var procShows = struct {
	sync.Mutex
	byRoot map[string]string
}{byRoot: map[string]string{}}

// procNeeded tells whether a command in namespace name, chrooted in root,
// is the one to mount /proc there, and counts it done.
func procNeeded(root, name string) bool {
	procShows.Lock()
	defer procShows.Unlock()
	if procShows.byRoot[root] == name {
		return false
	}
	procShows.byRoot[root] = name
	return true
}

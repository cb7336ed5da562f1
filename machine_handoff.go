package smol

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/smolvm/smol/machine"
	"golang.org/x/sys/unix"
)

// A machine's start can be split between two processes: one starts the
// VMM process (LaunchHandOff) and passes the descriptors of its
// BootHandOff to another, which waits for the boot (Adopt). The containerd
// shim uses it so that a pod's VMM starts in containerd's short-lived
// `shim start` process, at the same time as the shim's server, instead of
// after the server has started and containerd has called its Create.

// BootHandOff is a VMM process booting a machine, handed from the process
// that started it to the one that waits for it. Its files are what the
// waiter needs; ExtraFiles passes them on.
type BootHandOff struct {
	PID           int
	ConsoleBefore int64    // the console log's size before this boot
	Ready         *os.File // the pipe the VMM says "running" on, read end
	StartLock     *os.File // the machine's start lock, held until the boot ends
	PIDFD         *os.File // a pidfd of the VMM process: its exit, and a kill that cannot hit a reused pid
}

// Files returns the handoff's descriptors in the order AdoptFiles takes them.
func (h *BootHandOff) Files() []*os.File { return []*os.File{h.Ready, h.StartLock, h.PIDFD} }

// Close closes this process's copies of the handoff's descriptors (once
// they are passed on, or to give up the wait: the VMM boots on).
func (h *BootHandOff) Close() {
	for _, f := range h.Files() {
		f.Close()
	}
}

// AdoptFiles rebuilds a handoff from its descriptors as Files returned them.
func AdoptFiles(pid int, consoleBefore int64, files []*os.File) (*BootHandOff, error) {
	if len(files) != 3 || pid <= 0 || consoleBefore < 0 {
		return nil, errors.New("a boot handoff is a positive pid, a console size and three descriptors")
	}
	for _, f := range files {
		if f == nil {
			return nil, errors.New("a boot handoff lacks a descriptor")
		}
	}
	return &BootHandOff{PID: pid, ConsoleBefore: consoleBefore, Ready: files[0], StartLock: files[1], PIDFD: files[2]}, nil
}

// LaunchHandOff starts the machine's VMM process as Launch does, but
// leaves the wait for its boot to whoever gets the returned handoff
// (Adopt), in this process or another. The VMM boots on if nobody does.
func (m *NamedMachine) LaunchHandOff() (*BootHandOff, error) {
	v, err := m.spawnVMM(m.startSource())
	if err != nil {
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(v.cmd.Process.Pid, 0) // our unreaped child: its pid is still its own
	if err != nil {
		v.cmd.Process.Kill()
		v.cmd.Wait()
		v.ready.Close()
		v.lock.Unlock()
		return nil, fmt.Errorf("open the VMM process's pidfd: %w", err)
	}
	unix.CloseOnExec(pidfd)
	return &BootHandOff{PID: v.cmd.Process.Pid, ConsoleBefore: v.consoleBefore, Ready: v.ready,
		StartLock: v.lock.File(), PIDFD: os.NewFile(uintptr(pidfd), "vmm-pidfd")}, nil
}

// Adopt waits, as Launch's Boot does, for the boot a handoff describes;
// the Boot owns the handoff's descriptors from here on.
func (m *NamedMachine) Adopt(ctx context.Context, h *BootHandOff) *Boot {
	pidfd := int(h.PIDFD.Fd())
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		// A pidfd polls readable once its process has ended.
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	}()
	proc := vmmProcess{pid: h.PID, exited: exited, kill: func() { unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0) }}
	b := m.awaitBoot(ctx, proc, h.Ready, h.StartLock, h.ConsoleBefore)
	go func() {
		// The pidfd stays open while its exit is watched and a kill may
		// use it: until the VMM has ended and the boot's wait with it.
		<-exited
		<-b.Done()
		h.PIDFD.Close()
	}()
	return b
}

// endStart ends a start of the machine that another command is making,
// for a forced remove, and returns the start lock: it kills the VMM
// process that start waits for (the one holding the machine's VMM lock,
// as its state names it), and the start lets go of the lock once it sees
// its VMM gone. A VMM so new that it holds no lock yet is killed on a
// later try. It gives up after endStartTimeout.
func (m *NamedMachine) endStart(ctx context.Context) (*machine.Lock, error) {
	name := m.spec.Name
	deadline := time.Now().Add(endStartTimeout)
	for {
		if m.store.Alive(name) {
			if st, err := m.store.Status(name); err == nil && isVMMOf(st.PID, name) {
				unix.Kill(st.PID, unix.SIGKILL)
			}
		}
		l, err := m.lockStart()
		var starting *startingError
		if !errors.As(err, &starting) {
			return l, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w, which did not let go within %v of its VMM's end", err, endStartTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// endStartTimeout bounds how long a forced remove waits for a start it
// interrupted.
const endStartTimeout = 30 * time.Second

// isVMMOf tells whether pid is machine name's VMM process, by its command
// line (`... machine __vmm NAME ...`): a pid read from a state file is
// checked before it is killed, in case that process is gone and its pid
// taken by another.
func isVMMOf(pid int, name string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	for i := 0; i+2 < len(args); i++ {
		if args[i] == "machine" && args[i+1] == vmmCommand && args[i+2] == name {
			return true
		}
	}
	return false
}

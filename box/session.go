package box

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// session is one running box as the harness watches it: its life signs,
// its console, and the two sockets QEMU connected to.
type session struct {
	kernel   string // the box kernel, for symbols
	life     *life
	console  *consoleTail
	qemuExit error   // how QEMU ended, once watch has seen it
	wake     wakeups // lost wake-ups found and woken (wakeup.go); watch's alone

	mu       sync.Mutex
	lifeConn net.Conn // the life port; nil until QEMU connects
	monitor  *qmp     // nil until QEMU's monitor answers
	conns    []net.Conn
}

// acceptLife takes QEMU's connection to the life port and reads it until
// the box ends.
func (b *session) acceptLife(l net.Listener) {
	conn, err := l.Accept()
	if err != nil {
		return
	}
	b.mu.Lock()
	b.lifeConn = conn
	b.conns = append(b.conns, conn)
	b.mu.Unlock()
	b.life.read(conn)
}

// acceptMonitor takes QEMU's monitor connection and negotiates QMP.
func (b *session) acceptMonitor(l net.Listener, pid int, started func(*running)) {
	conn, err := l.Accept()
	if err != nil {
		return
	}
	b.mu.Lock()
	b.conns = append(b.conns, conn)
	b.mu.Unlock()
	q, err := newQMP(conn)
	if err != nil {
		return
	}
	b.mu.Lock()
	b.monitor = q
	b.mu.Unlock()
	if started != nil {
		started(&running{pid: pid, monitor: q, life: b.life})
	}
}

// close ends the harness's side of the sockets.
func (b *session) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		c.Close()
	}
}

// watch waits for QEMU to exit (ended false: the caller reads the
// command's status) or ends the box itself, killing QEMU, and then
// returns what Run returns (ended true): when ctx is done, when the
// command outlives opts.Timeout, or when the watchdog finds the box hung.
func (b *session) watch(ctx context.Context, qemu *os.Process, exited <-chan error, opts Options, began time.Time) (code int, ended bool, err error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wakeTick := time.NewTicker(wakeLookPeriod)
	defer wakeTick.Stop()
	var deadline <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(time.Until(began.Add(opts.Timeout)))
		defer t.Stop()
		deadline = t.C
	}
	end := func() {
		qemu.Kill() // SIGKILL: also ends a QEMU that is stopped or stuck
		b.qemuExit = <-exited
	}
	var bugSeen time.Time
	for {
		select {
		case b.qemuExit = <-exited:
			return 0, false, nil
		case <-ctx.Done():
			end()
			return -1, true, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-deadline:
			msg := fmt.Sprintf("the command did not finish within %v (SMOLBOX_TIMEOUT); its last console lines:%s%s%s",
				opts.Timeout, b.console.tail(), b.tasksReport(), b.vcpuReport())
			end()
			return -1, true, &reportError{ErrTimeout, msg}
		case now := <-wakeTick.C:
			b.checkWakeups(now)
		case now := <-tick.C:
			// The box's kernel hit its known crash: whatever runs from
			// now on runs on a kernel that took a page-fault loop and
			// lost a task, and its results say nothing. The oops gets a
			// few seconds to reach the console, then the box ends.
			if bug := b.console.kernelBug(); bug != "" {
				if bugSeen.IsZero() {
					bugSeen = now
				} else if now.Sub(bugSeen) >= bugGrace {
					end()
					return -1, true, fmt.Errorf("%w: %s (the box was ended)", ErrBoxKernelBug, bug)
				}
			}
			var what string
			kernelOK := true
			if opts.Watchdog > 0 {
				if h, hung := b.life.verdict(now, opts.Watchdog); hung {
					what, kernelOK = h.what(), h.kernelOK
				}
			}
			if what == "" && opts.Stalled != nil {
				what = opts.Stalled(began, now)
			}
			if what == "" {
				continue
			}
			if code, ok := b.life.exitStatus(); ok {
				// The command had finished; the box hung on its
				// way out. The command's result stands.
				end()
				fmt.Fprintf(os.Stderr, "box: %s after the command ended with status %d; the box was ended\n", what, code)
				return code, true, nil
			}
			diag := b.vcpuReport()
			if b.wake.done > 0 {
				diag += fmt.Sprintf("\n  (the harness had woken this box from %d lost interrupts: box/wakeup.go)", b.wake.done)
			}
			if kernelOK {
				diag = b.tasksReport() + diag
			}
			msg := what + "; its last console lines:" + b.console.tail() + diag
			end()
			return -1, true, &reportError{ErrBoxHung, msg}
		}
	}
}

// bugGrace is how long a box lives on after its kernel's known BUG line,
// for the rest of the oops to reach the console.
const bugGrace = 5 * time.Second

// taskWait bounds how long a box that is alive may take to list its tasks.
const taskWait = 10 * time.Second

// errNoLifePort is a request to a box whose life port never connected.
var errNoLifePort = errors.New("the box's life port never connected")

// tellInit writes one request line to the box's init over the life port
// (life.go): "tasks", or "wake", whose interrupt is the point (wakeup.go).
func (b *session) tellInit(request string) error {
	b.mu.Lock()
	conn := b.lifeConn
	b.mu.Unlock()
	if conn == nil {
		return errNoLifePort
	}
	conn.SetWriteDeadline(time.Now().Add(taskWait))
	_, err := conn.Write([]byte(request + "\n"))
	return err
}

// tasksReport asks the box's init what its tasks are doing (life.go), for
// a box that is alive but whose command is stuck or slow.
func (b *session) tasksReport() string {
	select { // a dump asked for earlier and not collected
	case <-b.life.tasks:
	default:
	}
	if err := b.tellInit("tasks"); errors.Is(err, errNoLifePort) {
		return "\n  (the box's life port never connected)"
	} else if err != nil {
		return fmt.Sprintf("\n  (cannot ask the box for its tasks: %v)", err)
	}
	select {
	case dump := <-b.life.tasks:
		return "\n  its tasks (how many, state, command, waiting in):\n    " + strings.Join(summarizeTasks(dump, 20), "\n    ")
	case <-time.After(taskWait):
		return fmt.Sprintf("\n  (the box did not list its tasks within %v)", taskWait)
	}
}

// vcpuReport asks QEMU where the box's vCPUs are.
func (b *session) vcpuReport() string {
	b.mu.Lock()
	q := b.monitor
	b.mu.Unlock()
	if q == nil {
		return "\n  (QEMU's monitor never answered)"
	}
	status, err := q.status()
	if err != nil {
		return fmt.Sprintf("\n  QEMU itself does not answer its monitor (%v): it is stuck or stopped", err)
	}
	cpus, err := q.vcpus()
	if err != nil {
		return fmt.Sprintf("\n  QEMU reports the box %s; its registers: %v", status, err)
	}
	syms, err := loadSymbols(b.kernel)
	if err != nil {
		syms = nil // addresses without names
	}
	var guestSyms *symbols
	if root, err := RepoRoot(); err == nil {
		guestSyms, _ = loadSymbols(filepath.Join(root, guestKernelPath))
	}
	return fmt.Sprintf("\n  QEMU reports the box %s; its vCPUs (names from the box kernel; a vCPU in a nested guest shows that guest's RIP):%s",
		status, describeVCPUs(cpus, syms, guestSyms))
}

package box

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The box's signs of life.
//
// A box can hang without crashing: three times in about twenty runs QEMU
// sat nearly idle for minutes with nothing on the console until it was
// killed by hand, and a box that hangs inside `make test` would hold CI
// until its own limit. Silence on the console proves nothing (a command
// may print nothing for an hour), so the box's init reports on a channel
// of its own, a virtio-serial port named lifePort, that the harness reads
// from a Unix socket QEMU connects to:
//
//	alive UPTIME   every beatPeriod, from a loop that runs from the
//	               initramfs and touches nothing but the box kernel:
//	               the box kernel schedules, its timers fire, its
//	               virtio-serial works;
//	9p UPTIME      every beatPeriod, from a second loop, after a stat of
//	               the job directory over 9p answered: the host files the
//	               command works on still answer (the hangs seen had a
//	               guest disk on 9p, so a share that stops answering is a
//	               lead, and a box waiting on it forever is hung, however
//	               alive its kernel);
//	status N       the command's exit status, before it is also written
//	               to the job directory (over 9p);
//	task ...       one line per task, then tasks-end, when the harness
//	               writes "tasks" (what a stuck box is waiting on).
//
// The harness ends a box that shows neither sign of life (no alive line
// and no console output) or whose 9p share has not answered for the
// watchdog period.

const (
	lifePort = "smolbox.life" // the virtio-serial port's name in the box

	// beatPeriod is how often the box's init reports; it is sent to
	// the box on its command line (smolbox.beat=).
	beatPeriod = 2 * time.Second

	// minWatchdog keeps a watchdog from firing between two beats that a
	// busy box sends a little late.
	minWatchdog = 5 * beatPeriod

	// defaultWatchdog is long enough for a box slowed by a busy host
	// (its beats arrive late by seconds, not minutes) and short against
	// a CI job's limit.
	defaultWatchdog = 120 * time.Second

	// bootGrace is the least time a box has for its first heartbeat of
	// each kind, whatever a shorter watchdog says: before its init runs
	// the box kernel cannot report, and on a busy host its boot alone
	// (struct pages for 6 GiB under a software CPU) took over 10 s.
	bootGrace = defaultWatchdog
)

// life is what the harness knows of the box's signs of life. It is fed by
// the life port's reader and the console, and read by the watchdog; the
// zero value is not ready, use newLife.
type life struct {
	mu        sync.Mutex
	start     time.Time // when QEMU started
	lastAlive time.Time // last alive line or console output
	last9p    time.Time // last 9p line
	uptime    string    // the box's uptime in its last beat
	beats     int       // alive lines received
	beats9p   int       // 9p lines received
	status    int       // the command's status, when hasStatus
	hasStatus bool
	tasks     chan []string // a task dump, once per request
	dump      []string      // task lines of the dump being received
}

func newLife(start time.Time) *life {
	return &life{start: start, lastAlive: start, last9p: start, tasks: make(chan []string, 1)}
}

// console records console output: a box that prints is alive.
func (l *life) console(now time.Time) {
	l.mu.Lock()
	l.lastAlive = now
	l.mu.Unlock()
}

// line takes one line from the life port.
func (l *life) line(s string, now time.Time) {
	kind, rest, _ := strings.Cut(strings.TrimRight(s, "\r"), " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	switch kind {
	case "alive":
		l.lastAlive, l.uptime = now, rest
		l.beats++
	case "9p":
		l.last9p, l.uptime = now, rest
		l.beats9p++
	case "status":
		if n, err := strconv.Atoi(rest); err == nil {
			l.status, l.hasStatus = n, true
		}
	case "task":
		l.dump = append(l.dump, rest)
	case "tasks-end":
		select {
		case l.tasks <- l.dump:
		default: // nobody asked; drop it
		}
		l.dump = nil
	}
}

// read feeds l from the life port until it closes.
func (l *life) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		l.line(s.Text(), time.Now())
	}
}

// lastSign returns when the box last showed a sign of life (an alive
// line or console output).
func (l *life) lastSign() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAlive
}

// exitStatus returns the status the box reported, if any.
func (l *life) exitStatus() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status, l.hasStatus
}

// hang says why the box counts as hung at now with the given watchdog
// period, or "" while it does not.
type hang struct {
	silent     time.Duration // how long since the last sign of life
	kernelOK   bool          // the box kernel still reports (only its 9p share is silent)
	beats      int
	lastUptime string
}

func (l *life) verdict(now time.Time, watchdog time.Duration) (h hang, hung bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h = hang{beats: l.beats, lastUptime: l.uptime}
	if d := now.Sub(l.lastAlive); d >= beatLimit(watchdog, l.beats) {
		h.silent = d
		return h, true
	}
	// A share that stopped answering is only news while the kernel's
	// own beats are current: when both stopped, the 9p loop's last beat
	// may simply be older (it runs behind on a busy box), and the
	// verdict waits the moments until the kernel's silence is the news.
	if d := now.Sub(l.last9p); d >= beatLimit(watchdog, l.beats9p) && now.Sub(l.lastAlive) < staleAlive {
		h.silent, h.kernelOK = d, true
		return h, true
	}
	return hang{}, false
}

// staleAlive is how old the last alive beat may be for the box kernel to
// count as alive now: a few beats, late as a busy box sends them.
const staleAlive = 3 * beatPeriod

// beatLimit is how long a box may be silent on a heartbeat of which it
// has sent n so far.
func beatLimit(watchdog time.Duration, n int) time.Duration {
	if n == 0 {
		return max(watchdog, bootGrace)
	}
	return watchdog
}

// reported says whether the box has sent both kinds of heartbeat, after
// which the watchdog period alone applies.
func (l *life) reported() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.beats > 0 && l.beats9p > 0
}

// what is the first line of a hung box's report.
func (h hang) what() string {
	s := int(h.silent.Round(time.Second) / time.Second)
	if h.kernelOK {
		return fmt.Sprintf("the box's kernel is alive, but the host files (9p) have not answered it for %d s", s)
	}
	if h.beats == 0 {
		return fmt.Sprintf("no sign of life for %d s (the box's init never reported)", s)
	}
	return fmt.Sprintf("no sign of life for %d s (last heartbeat at box uptime %s s)", s, strings.Fields(h.lastUptime + " ?")[0])
}

// summarizeTasks turns a task dump ("TID STATE u|k WCHAN COMM" lines,
// k for a kernel thread) into a few lines, one per kind of task: count,
// state, command and what it waits in. Tasks that cannot run (D) come
// first: they are what a stuck box waits on. Kernel threads are left out
// unless they are in D or running (a kernel thread asleep in its loop is
// the box's furniture).
func summarizeTasks(lines []string, max int) []string {
	type key struct{ state, wchan, comm string }
	counts := map[key]int{}
	for _, ln := range lines {
		f := strings.SplitN(ln, " ", 5)
		if len(f) < 5 || f[2] == "k" && f[1] != "D" && f[1] != "R" {
			continue
		}
		counts[key{f[1], f[3], f[4]}]++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	rank := func(state string) int {
		switch state {
		case "D":
			return 0
		case "R":
			return 1
		}
		return 2
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if rank(a.state) != rank(b.state) {
			return rank(a.state) < rank(b.state)
		}
		if counts[a] != counts[b] {
			return counts[a] > counts[b]
		}
		return a.comm+a.wchan < b.comm+b.wchan
	})
	var out []string
	for i, k := range keys {
		if i == max {
			out = append(out, fmt.Sprintf("... and %d more kinds", len(keys)-max))
			break
		}
		wchan := k.wchan
		if wchan == "0" {
			wchan = "-"
		}
		out = append(out, fmt.Sprintf("%3d× %s %-16s in %s", counts[k], k.state, k.comm, wchan))
	}
	return out
}

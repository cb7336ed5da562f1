package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smolvm/smol/internal/sparsefile"
)

// Snapshot, restore and fork of named machines, through the CLI, with
// Linux guests in the box.

// streamScript writes a deterministic file of streamLines lines in the
// guest, slowly enough to be in flight during a fork, syncs it and then
// records its checksum: a machine that continues it completes the same
// bytes.
const (
	streamLines  = 4000
	streamScript = `(i=0; while [ $i -lt 4000 ]; do echo "line-$i-0123456789abcdef"; i=$((i+1)); [ $((i % 400)) = 0 ] && sleep 0.1; done > /root/stream; sync; sha256sum /root/stream | cut -d' ' -f1 > /root/stream.sum) >/dev/null 2>&1 &`
	// The counter is replaced, not rewritten, so that a fork between the
	// truncation and the write cannot leave a child an empty file.
	counterScript = `(i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.2; done) >/dev/null 2>&1 &`
)

func streamSum() string {
	var b strings.Builder
	for i := 0; i < streamLines; i++ {
		fmt.Fprintf(&b, "line-%d-0123456789abcdef\n", i)
	}
	s := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(s[:])
}

// TestMachineFork: eight children of a running machine, forked while a
// counter runs in it and a file is being written, each continue both
// from the fork point, with their own identity and their own disk. Nine
// guests at once in the box meet its known failures (a guest that
// triple-faults with reset-state registers, or stalls: README); such an
// attempt is started again from scratch, logged as KNOWN ISSUE. A wrong
// result fails at once.
func TestMachineFork(t *testing.T) {
	retryIfGuestDies(t, func() error {
		r := &forkRun{t: t, home: t.TempDir()}
		r.scenario()
		if r.died != "" {
			return &guestDied{msg: r.died}
		}
		return nil
	})
}

// forkRun is one attempt of TestMachineFork: its commands either answer,
// or record that a guest died or stalled (died) and report false.
type forkRun struct {
	t    *testing.T
	home string
	mu   sync.Mutex
	died string
}

// must runs `smol machine ARGS`. A failure that says a guest stopped
// answering (its agent unreachable, its session cut, its VMM failed) is
// recorded as the box's known failure; any other fails the test.
func (r *forkRun) must(args ...string) (string, bool) {
	code, out, stderr, err := machineTry(r.t, r.home, args...)
	if err == nil && code == 0 {
		return out, true
	}
	msg := fmt.Sprintf("smol machine %v: exit %d, %v: %s", args, code, err, stderr)
	for _, sign := range []string{"ended the session without an exit status", "vsock handshake", "i/o timeout", "did not start", " is failed", "does not answer"} {
		if err != nil || strings.Contains(stderr, sign) {
			r.mu.Lock()
			if r.died == "" {
				r.died = msg
			}
			r.mu.Unlock()
			return "", false
		}
	}
	r.t.Error(msg)
	return "", false
}

func (r *forkRun) counter(name string) (int, bool) {
	out, ok := r.must("exec", name, "--", "cat", "/tmp/counter")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		r.t.Errorf("%s: counter %q", name, out)
		return 0, false
	}
	return n, true
}

func (r *forkRun) scenario() {
	t, home := r.t, r.home
	countingMachine(t, home, "p")
	mustMachine(t, home, "exec", "p", "--", "sh", "-c", streamScript)
	atFork := counter(t, home, "p")

	const n = 8
	out, ok := r.must("fork", "p", "--count", strconv.Itoa(n))
	if !ok {
		return
	}
	children := strings.Fields(out)
	if len(children) != n || children[0] != "p-fork-1" || children[n-1] != fmt.Sprintf("p-fork-%d", n) {
		t.Fatalf("fork printed %q", out)
	}
	for _, c := range children {
		t.Cleanup(func() { machineCLI(t, home, "rm", "-f", c) })
	}
	all := append([]string{"p"}, children...)

	type seen struct{ random, machineID, generation, hostname string }
	got := make([]seen, len(all))
	var wg sync.WaitGroup
	for i, name := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c1, ok := r.counter(name)
			if !ok {
				return
			}
			if c1 < atFork {
				t.Errorf("%s: counter %d, below the fork point's %d: it did not continue", name, c1, atFork)
			}
			before := time.Now().Unix()
			clock, ok := r.must("exec", name, "--", "date", "+%s")
			after := time.Now().Unix()
			if !ok {
				return
			}
			if sec, err := strconv.ParseInt(strings.TrimSpace(clock), 10, 64); err != nil || sec < before-1 || sec > after+1 {
				t.Errorf("%s: guest clock %q, host %d..%d", name, clock, before, after)
			}
			var s seen
			for _, q := range []struct {
				into *string
				args []string
			}{
				{&s.random, []string{"sh", "-c", "head -c 32 /dev/urandom | od -An -tx1"}},
				{&s.machineID, []string{"sh", "-c", "cat /etc/machine-id 2>/dev/null; true"}},
				{&s.generation, []string{"cat", "/run/smol/generation"}},
				{&s.hostname, []string{"hostname"}},
				{new(string), []string{"sh", "-c", "echo " + name + " > /root/mine"}},
			} {
				if *q.into, ok = r.must(append([]string{"exec", name, "--"}, q.args...)...); !ok {
					return
				}
			}
			got[i] = s
			deadline := time.Now().Add(2 * time.Minute)
			for {
				sum, ok := r.must("exec", name, "--", "sh", "-c", "cat /root/stream.sum 2>/dev/null; true")
				if !ok {
					return
				}
				if sum != "" {
					if strings.TrimSpace(sum) != streamSum() {
						t.Errorf("%s: the write stream in flight at the fork completed as %q, want %s", name, sum, streamSum())
					}
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s: the write stream never completed", name)
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
			time.Sleep(time.Second)
			if c2, ok := r.counter(name); ok && c2 <= c1 {
				t.Errorf("%s: counter stuck at %d", name, c1)
			}
		}()
	}
	wg.Wait()
	if r.died != "" {
		return
	}
	randoms, ids := map[string]string{}, map[string]string{}
	for i, name := range all {
		s := got[i]
		if prev, dup := randoms[s.random]; dup {
			t.Errorf("%s and %s read the same random bytes %q", prev, name, s.random)
		}
		randoms[s.random] = name
		wantGen := "1\n"
		if name == "p" {
			wantGen = "0\n"
		} else {
			if len(strings.TrimSpace(s.machineID)) != 32 {
				t.Errorf("%s: machine-id %q", name, s.machineID)
			}
			if prev, dup := ids[s.machineID]; dup {
				t.Errorf("%s and %s share machine-id %q", prev, name, s.machineID)
			}
			ids[s.machineID] = name
		}
		if s.generation != wantGen || s.hostname != name+"\n" {
			t.Errorf("%s: generation %q, hostname %q", name, s.generation, s.hostname)
		}
	}
	// Each wrote /root/mine after the fork: nobody sees another's.
	for _, name := range all {
		out, ok := r.must("exec", name, "--", "cat", "/root/mine")
		if !ok {
			return
		}
		if out != name+"\n" {
			t.Errorf("%s reads /root/mine = %q", name, out)
		}
	}

	// A fork of a fork carries the child's state on.
	if _, ok := r.must("exec", children[0], "--", "sh", "-c", "echo grand > /root/g"); !ok {
		return
	}
	gcOut, ok := r.must("fork", children[0], "--name-prefix", "gc")
	if !ok {
		return
	}
	gc := strings.TrimSpace(gcOut)
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", gc) })
	if out, ok := r.must("exec", gc, "--", "cat", "/root/g", "/run/smol/generation"); !ok {
		return
	} else if gc != "gc-1" || out != "grand\n2\n" {
		t.Errorf("grandchild %q reads %q", gc, out)
	}

	// Where the filesystem cannot clone files, the children's writable
	// layers are copy-on-write layers over the parent's frozen one, which
	// survive a cold start.
	if !canReflink(t, home) {
		for _, name := range []string{children[0], gc} {
			if _, err := os.Stat(filepath.Join(home, "machines", name, "storage.smolcow")); err != nil {
				t.Errorf("%s has no copy-on-write layer on a filesystem without FICLONE: %v", name, err)
			}
		}
	}
	for _, step := range [][]string{{"stop", children[1]}, {"start", children[1]}} {
		if _, ok := r.must(step...); !ok {
			return
		}
	}
	if out, ok := r.must("exec", children[1], "--", "cat", "/root/mine", "/root/stream.sum"); !ok {
		return
	} else if out != children[1]+"\n"+streamSum()+"\n" {
		t.Errorf("%s after a cold start reads %q", children[1], out)
	}

	// Removing the children leaves no VMM process of theirs behind.
	pids := map[string]int{}
	for _, name := range append(children, gc) {
		s := machineStatus(t, home, name)
		if s.PID == 0 {
			// Not a leak: the machine was no longer running. The box's
			// silent triple fault is its known failure (the attempt is
			// run again); anything else fails the test. Say how it ended.
			msg := fmt.Sprintf("%s was %s before rm -f, not running: %s; console: %q", name, s.State, s.Error, s.LastConsole)
			if silentTripleFaultReport(s.Error + " ") {
				r.mu.Lock()
				if r.died == "" {
					r.died = msg
				}
				r.mu.Unlock()
			} else {
				t.Error(msg)
			}
		}
		pids[name] = s.PID
		mustMachine(t, home, "rm", "-f", name)
	}
	for name, pid := range pids {
		if pid != 0 && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("the VMM of %s (pid %d) outlived rm -f", name, pid)
		}
	}
	if c, ok := r.counter("p"); ok && c <= atFork {
		t.Errorf("the parent's counter stands at %d", c)
	}
}

// countingMachine creates and starts a busybox machine with counterScript
// running in it; it is removed at the end of the test.
func countingMachine(t *testing.T, home, name string) {
	t.Helper()
	mustMachine(t, home, "create", name, "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", name) })
	startMachine(t, home, name)
	mustMachine(t, home, "exec", name, "--", "sh", "-c", counterScript)
	waitCounter(t, home, name, "/tmp/counter")
}

// zombie tells whether pid is an exited process not yet reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// TestMachineForkTemplate: in template mode the parent stays paused as
// the frozen base; killing its VMM leaves its children running.
func TestMachineForkTemplate(t *testing.T) {
	home := t.TempDir()
	countingMachine(t, home, "base")
	kids := strings.Fields(mustMachine(t, home, "fork", "base", "--count", "2", "--template", "--name-prefix", "kid"))
	for _, k := range kids {
		t.Cleanup(func() { machineCLI(t, home, "rm", "-f", k) })
	}
	if len(kids) != 2 {
		t.Fatalf("fork printed %q", kids)
	}
	if s := machineStatus(t, home, "base"); s.State != "paused" {
		t.Errorf("the template is %s, want paused", s.State)
	}
	pid := machineStatus(t, home, "base").PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	for _, k := range kids {
		c1 := counter(t, home, k)
		time.Sleep(time.Second)
		if c2 := counter(t, home, k); c2 <= c1 {
			t.Errorf("%s stopped counting (%d) after its template's VMM was killed", k, c1)
		}
	}
}

// TestMachineSnapshotRestore: a snapshot restored on a fresh SMOL_HOME
// (no image, no registry) continues the same processes, and a timer that
// slept across 30 s of snapshot wakes.
func TestMachineSnapshotRestore(t *testing.T) {
	home := t.TempDir()
	ref := machineImage(t)
	createMachine(t, home, "orig", ref)
	startMachine(t, home, "orig")
	mustMachine(t, home, "exec", "orig", "--", "sh", "-c", "echo on-disk > /root/kept")
	mustMachine(t, home, "exec", "orig", "--", "sh", "-c", counterScript)
	waitCounter(t, home, "orig", "/tmp/counter")
	mustMachine(t, home, "exec", "orig", "--", "sh", "-c", "(sleep 20; echo woke > /tmp/woke) >/dev/null 2>&1 &")
	snap := filepath.Join(t.TempDir(), "orig.smolsnap")
	mustMachine(t, home, "snapshot", "orig", "-o", snap, "--leave-running")
	at := counter(t, home, "orig")
	mustMachine(t, home, "stop", "orig")
	if code, _, stderr := machineCLI(t, home, "snapshot", "orig", "-o", snap+".2"); code == 0 || !strings.Contains(stderr, "stopped") {
		t.Errorf("snapshot of a stopped machine: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(snap + ".2"); err == nil {
		t.Error("a refused snapshot left a file")
	}
	time.Sleep(30 * time.Second)

	fresh := t.TempDir()
	mustMachine(t, fresh, "restore", snap, "--name", "copy")
	t.Cleanup(func() { machineCLI(t, fresh, "rm", "-f", "copy") })
	c1 := counter(t, fresh, "copy")
	if c1 < at-10 || c1 > at+10 { // the counter ran on a moment between snapshot and `at`
		t.Errorf("restored counter %d, the snapshot's was about %d", c1, at)
	}
	if out := mustMachine(t, fresh, "exec", "copy", "--", "cat", "/root/kept"); out != "on-disk\n" {
		t.Errorf("/root/kept = %q", out)
	}
	if w := waitSleeper(t, fresh, "copy"); w != "woke\n" {
		t.Errorf("/tmp/woke = %q", w)
	}
	time.Sleep(time.Second)
	if c2 := counter(t, fresh, "copy"); c2 <= c1 {
		t.Errorf("the restored counter is stuck at %d", c1)
	}
	// Stopped and started again, the copy boots from its own disks.
	mustMachine(t, fresh, "stop", "copy")
	startMachine(t, fresh, "copy")
	if out := mustMachine(t, fresh, "exec", "copy", "--", "cat", "/root/kept"); out != "on-disk\n" {
		t.Errorf("after a cold start /root/kept = %q", out)
	}
}

// waitSleeper waits a minute for the file of the sleeper that
// TestMachineSnapshotRestore started before its snapshot. When it does
// not come, it says what the guest's clocks and processes were doing: a
// counter that went on while the sleeper did not tells a timer armed
// before the snapshot from one armed after it.
func waitSleeper(t *testing.T, home, name string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if code, out, _ := machineCLI(t, home, "exec", name, "--", "cat", "/tmp/woke"); code == 0 && out != "" {
			return out
		}
		time.Sleep(300 * time.Millisecond)
	}
	probe := "cat /proc/uptime; cat /tmp/counter; sleep 1; cat /proc/uptime; cat /tmp/counter; (ps -o pid,stat,time,args 2>/dev/null || ps); grep -E 'now at|expires at' /proc/timer_list 2>/dev/null | head -20"
	_, out, stderr := machineCLI(t, home, "exec", name, "--", "sh", "-c", probe)
	t.Fatalf("machine %s: /tmp/woke did not appear within a minute; the guest (uptime, counter, 1 s later both again, processes):\n%s%s%s",
		name, out, stderr, machineLogs(home, name, machineStatus(t, home, name).PID))
	return ""
}

// TestMachineSnapshotBadInput: every refusal is one line and a non-zero
// exit, and leaves the parent running and nothing behind.
func TestMachineSnapshotBadInput(t *testing.T) {
	home := t.TempDir()
	dir := t.TempDir()
	mustMachine(t, home, "create", "bad", "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "bad") })
	mustMachine(t, home, "create", "taken-1", "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "taken-1") })
	expectRefusal := func(want string, args ...string) {
		t.Helper()
		code, _, stderr := machineCLI(t, home, args...)
		if code == 0 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("smol machine %q: exit %d, stderr %q, want one line with %q", args, code, stderr, want)
		}
	}
	expectRefusal("created", "fork", "bad")
	startMachine(t, home, "bad")
	exists := filepath.Join(dir, "exists")
	os.WriteFile(exists, []byte("mine"), 0o600)
	expectRefusal("--count 0", "fork", "bad", "--count", "0")
	expectRefusal("--count 129", "fork", "bad", "--count", "129")
	expectRefusal("taken-1 already exists", "fork", "bad", "--name-prefix", "taken")
	expectRefusal("already exists", "snapshot", "bad", "-o", exists)
	expectRefusal("-o PATH", "snapshot", "bad")
	expectRefusal("machine name", "restore", exists, "--name", "../x")
	expectRefusal("not a usable smol snapshot", "restore", exists, "--name", "r1")
	snap := filepath.Join(dir, "good.snap")
	mustMachine(t, home, "snapshot", "bad", "-o", snap, "--leave-running")
	fi, err := os.Stat(snap)
	if err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.snap")
	if err := exec.Command("cp", "--sparse=always", snap, short).Run(); err != nil {
		t.Fatal(err)
	}
	os.Truncate(short, fi.Size()-4096)
	expectRefusal("outside the file", "restore", short, "--name", "r2")
	expectRefusal("exists", "restore", snap, "--name", "taken-1")
	if b, _ := os.ReadFile(exists); string(b) != "mine" {
		t.Error("a refused snapshot overwrote an existing file")
	}
	for _, n := range []string{"r1", "r2"} {
		if _, err := os.Stat(filepath.Join(home, "machines", n)); err == nil {
			t.Errorf("a refused restore left machine %s", n)
		}
	}
	if out := mustMachine(t, home, "exec", "bad", "--", "echo", "alive"); out != "alive\n" {
		t.Errorf("the machine after the refusals: %q", out)
	}
}

// canReflink tells whether dir's filesystem clones files (FICLONE).
func canReflink(t *testing.T, dir string) bool {
	src := filepath.Join(dir, ".reflink-probe")
	os.WriteFile(src, []byte("probe"), 0o600)
	defer os.Remove(src)
	defer os.Remove(src + ".clone")
	return sparsefile.Reflink(src, src+".clone") == nil
}

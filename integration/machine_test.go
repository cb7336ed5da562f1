package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/machine"
)

// Persistent machines, driven through the CLI as a user would: each
// started machine is a detached VMM process of its own.

// machineCLI runs `smol machine ARGS...` with SMOL_HOME=home.
func machineCLI(t *testing.T, home string, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr, hung := smolRunOnce(t, home, nil, false, append([]string{"machine"}, args...)...)
	if hung {
		diagnosis := ""
		if name := machineNamed(home, args); name != "" {
			diagnosis = machineDiagnosis(home, name)
		}
		t.Fatalf("smol machine %v did not finish within %v; stderr: %s%s", args, smolRunTimeout, stderr, diagnosis)
	}
	return code, stdout, stderr
}

// machineNamed is the machine a `smol machine ARGS...` command addresses:
// its first argument after the subcommand, or for cp the NAME of its
// NAME:PATH argument; "" if no such machine exists in home.
func machineNamed(home string, args []string) string {
	if len(args) < 2 {
		return ""
	}
	candidates := args[1:2]
	if args[0] == "cp" {
		candidates = nil
		for _, a := range args[1:] {
			if name, _, ok := strings.Cut(a, ":"); ok {
				candidates = append(candidates, name)
			}
		}
	}
	for _, name := range candidates {
		if _, err := os.Stat(filepath.Join(home, "machines", name)); err == nil && name != "" {
			return name
		}
	}
	return ""
}

// machineDiagnosis says where machine name's VMM process was when a
// command to it hung: it is ended with SIGABRT (its goroutines go to its
// VMM log: it inherited GOTRACEBACK=all from the start command), then the
// ends of its VMM log and console are returned.
func machineDiagnosis(home, name string) string {
	dir := filepath.Join(home, "machines", name)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	var st struct {
		PID int `json:"pid"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		json.Unmarshal(b, &st)
	}
	if st.PID > 0 {
		syscall.Kill(st.PID, syscall.SIGABRT)
		time.Sleep(3 * time.Second)
	}
	return machineLogs(home, name, st.PID)
}

// machineLogs returns the ends of machine name's VMM log and console.
func machineLogs(home, name string, pid int) string {
	dir := filepath.Join(home, "machines", name)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	end := func(file string, n int) string {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err.Error()
		}
		return string(tail(b, n))
	}
	return fmt.Sprintf("\n--- machine %s (VMM pid %d), %s:\n%s\n--- %s:\n%s", name, pid,
		machine.VMMLog, end(machine.VMMLog, 30000), machine.ConsoleLog, end(machine.ConsoleLog, 4000))
}

// machineCrash returns the crash a machine's VMM recorded when the
// machine ended (the console log's last line, "smol: machine NAME ended at
// TIME: guest crashed: ..."), or "" when it is running or ended otherwise.
// The VMM writes that line just after the guest stopped, so a command that
// saw its session cut may look a moment before it: this waits up to 5 s
// for the machine to end.
func machineCrash(home, name string) string {
	console := filepath.Join(home, "machines", name, machine.ConsoleLog)
	prefix := "smol: machine " + name + " ended at "
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		b, _ := os.ReadFile(console)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if last := lines[len(lines)-1]; strings.HasPrefix(last, prefix) {
			if _, crash, ok := strings.Cut(last, ": guest crashed: "); ok {
				return crash
			}
			return ""
		}
		if time.Now().After(deadline) {
			return ""
		}
	}
}

// mustMachine runs a machine command that must succeed.
func mustMachine(t *testing.T, home string, args ...string) string {
	t.Helper()
	code, stdout, stderr := machineCLI(t, home, args...)
	if code != 0 {
		logs := ""
		if len(args) > 1 {
			logs = machineLogs(home, args[1], 0)
		}
		t.Fatalf("smol machine %v: exit %d, stderr: %s%s", args, code, stderr, logs)
	}
	return stdout
}

// startMachine starts a machine; a guest that dies while booting (the
// box's known failure) gets one more try, logged.
func startMachine(t *testing.T, home, name string) {
	t.Helper()
	code, _, stderr := machineCLI(t, home, "start", name)
	if code != 0 && strings.Contains(stderr, "did not start") {
		t.Logf("KNOWN ISSUE: machine %s did not start, once more; stderr: %s", name, stderr)
		code, _, stderr = machineCLI(t, home, "start", name)
	}
	if code != 0 {
		t.Fatalf("smol machine start %s: exit %d, stderr: %s", name, code, stderr)
	}
}

// machineImage pushes the busybox image and returns its reference.
func machineImage(t *testing.T) string {
	reg := newTestRegistry(t)
	return reg.push(t, "test/machine", image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t)))
}

func createMachine(t *testing.T, home, name, ref string) {
	t.Helper()
	mustMachine(t, home, "create", name, "--image", ref, "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", name) })
}

func machineStatus(t *testing.T, home, name string) smol.MachineStatus {
	t.Helper()
	var s smol.MachineStatus
	if err := json.Unmarshal([]byte(mustMachine(t, home, "status", name, "--json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMachineLifecycle(t *testing.T) {
	home := t.TempDir()
	ref := machineImage(t)
	createMachine(t, home, "m1", ref)
	if s := machineStatus(t, home, "m1"); s.State != "created" {
		t.Errorf("after create: %s", s.State)
	}
	startMachine(t, home, "m1")
	// Synced: a guest the box kills later (its known failure, retried
	// below) must not take the file with it.
	machineStep(t, home, "m1", func() error {
		_, err := machineOut(t, home, "exec", "m1", "--", "sh", "-c", "echo persisted > /root/f && sync")
		return err
	})

	// Each step below runs in machineStep: a guest the box kills meanwhile
	// is started again and the step repeated; a wrong answer from a live
	// guest fails the test.
	t.Run("concurrent execs", func(t *testing.T) {
		machineStep(t, home, "m1", func() error {
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code, out, errOut, err := machineTry(t, home, "exec", "m1", "--", "sh", "-c", fmt.Sprintf("echo out-%d; echo err-%d >&2; exit %d", i, i, i))
					if err == nil && (code != i || out != fmt.Sprintf("out-%d\n", i) || errOut != fmt.Sprintf("err-%d\n", i)) {
						err = fmt.Errorf("exec %d: exit %d, stdout %q, stderr %q", i, code, out, errOut)
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		})
	})

	t.Run("keeps running after the CLI exits", func(t *testing.T) {
		machineStep(t, home, "m1", func() error {
			first, err := startCounter(t, home, "m1", "/tmp/counter")
			if err != nil {
				return err
			}
			time.Sleep(2 * time.Second)
			second, err := readCounter(t, home, "m1", "/tmp/counter")
			if err != nil {
				return err
			}
			if second <= first {
				t.Errorf("counter went from %d to %d", first, second)
			}
			return nil
		})
		var list []smol.MachineStatus
		if err := json.Unmarshal([]byte(mustMachine(t, home, "ls", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Name != "m1" || list[0].State != "running" || list[0].PID == 0 || list[0].HostMemory == 0 {
			t.Errorf("ls --json: %+v", list)
		}
	})

	t.Run("cp both ways", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "tree")
		os.MkdirAll(filepath.Join(src, "sub"), 0o755)
		big := make([]byte, bulkMiB(20)<<20)
		rand.New(rand.NewSource(1)).Read(big)
		os.WriteFile(filepath.Join(src, "big"), big, 0o640)
		os.WriteFile(filepath.Join(src, "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
		os.Symlink("../big", filepath.Join(src, "sub", "link"))
		mt := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
		os.Chtimes(filepath.Join(src, "big"), mt, mt)
		back := filepath.Join(t.TempDir(), "back")
		machineStep(t, home, "m1", func() error {
			os.RemoveAll(back)
			for _, args := range [][]string{{"cp", src, "m1:/root/"}, {"cp", "m1:/root/tree", back}} {
				code, _, stderr, err := machineTry(t, home, args...)
				if err != nil {
					return err
				}
				if code != 0 {
					return fmt.Errorf("smol machine %v: exit %d, %s", args, code, stderr)
				}
			}
			return nil
		})
		if out := mustMachine(t, home, "exec", "m1", "--", "/root/tree/sub/run.sh"); out != "ran\n" {
			t.Errorf("copied script ran: %q", out)
		}
		got, err := os.ReadFile(filepath.Join(back, "big"))
		if err != nil || sha256.Sum256(got) != sha256.Sum256(big) {
			t.Errorf("%d MiB file round trip: %d bytes, %v", len(big)>>20, len(got), err)
		}
		for p, want := range map[string]os.FileMode{"big": 0o640, "sub/run.sh": 0o755, "sub": 0o755 | os.ModeDir} {
			if fi, err := os.Lstat(filepath.Join(back, p)); err != nil || fi.Mode() != want {
				t.Errorf("%s: %v %v, want %v", p, fi.Mode(), err, want)
			}
		}
		if fi, _ := os.Stat(filepath.Join(back, "big")); !fi.ModTime().Equal(mt) {
			t.Errorf("mtime %v, want %v", fi.ModTime(), mt)
		}
		if l, _ := os.Readlink(filepath.Join(back, "sub", "link")); l != "../big" {
			t.Errorf("symlink -> %q", l)
		}
		code, _, stderr := machineCLI(t, home, "cp", "m1:/no/such", t.TempDir())
		if code == 0 || !strings.Contains(stderr, "no such file") {
			t.Errorf("cp of a missing guest path: exit %d, %q", code, stderr)
		}
	})

	t.Run("pause stops the guest and its CPU use", func(t *testing.T) {
		// A counter of its own: a retried step above may have restarted m1.
		machineStep(t, home, "m1", func() error {
			_, err := startCounter(t, home, "m1", "/tmp/pcounter")
			return err
		})
		mustMachine(t, home, "pause", "m1")
		s := machineStatus(t, home, "m1")
		if s.State != "paused" {
			t.Fatalf("after pause: %s", s.State)
		}
		code, _, stderr := machineCLI(t, home, "exec", "m1", "--", "true")
		if code == 0 || !strings.Contains(stderr, "resume") {
			t.Errorf("exec while paused: exit %d, %q", code, stderr)
		}
		before := cpuTicks(t, s.PID)
		time.Sleep(2 * time.Second)
		if used := cpuTicks(t, s.PID) - before; used > 20 { // 0.2 s of 2
			t.Errorf("the paused VMM used %d ticks of CPU in 2 s", used)
		}
		mustMachine(t, home, "resume", "m1")
		// The counter goes on from where the pause froze it; a guest the
		// box kills after the resume is started again with a new counter.
		machineStep(t, home, "m1", func() error {
			first, err := readCounter(t, home, "m1", "/tmp/pcounter")
			if errors.Is(err, os.ErrNotExist) { // a restarted guest
				first, err = startCounter(t, home, "m1", "/tmp/pcounter")
			}
			if err != nil {
				return err
			}
			time.Sleep(time.Second)
			second, err := readCounter(t, home, "m1", "/tmp/pcounter")
			if err != nil {
				return err
			}
			if second <= first {
				t.Errorf("after resume the counter went from %d to %d", first, second)
			}
			return nil
		})
	})

	mustMachine(t, home, "stop", "m1")
	if s := machineStatus(t, home, "m1"); s.State != "stopped" {
		t.Errorf("after stop: %s", s.State)
	}
	code, _, stderr := machineCLI(t, home, "exec", "m1", "--", "true")
	if code == 0 || !strings.Contains(stderr, "smol machine start m1") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exec into a stopped machine: exit %d, stderr %q", code, stderr)
	}
	startMachine(t, home, "m1")
	if out := mustMachine(t, home, "exec", "m1", "--", "cat", "/root/f"); out != "persisted\n" {
		t.Errorf("after a restart the file holds %q", out)
	}

	t.Run("a killed VMM leaves the machine failed, and it starts again", func(t *testing.T) {
		s := machineStatus(t, home, "m1")
		if s.PID == 0 {
			t.Fatalf("no pid: %+v", s)
		}
		syscall.Kill(s.PID, syscall.SIGKILL)
		deadline := time.Now().Add(10 * time.Second)
		for machineStatus(t, home, "m1").State != "failed" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if s := machineStatus(t, home, "m1"); s.State != "failed" || !strings.Contains(s.Error, "died") || s.LastConsole == "" {
			t.Errorf("after SIGKILL: %+v", s)
		}
		startMachine(t, home, "m1")
		if out := mustMachine(t, home, "exec", "m1", "--", "cat", "/root/f"); out != "persisted\n" {
			t.Errorf("after the kill the file holds %q", out)
		}
	})

	t.Run("stop --timeout on a guest that ignores shutdown", func(t *testing.T) {
		// The guest freezes its own agent (PID 1 moved into a frozen
		// cgroup) a moment after the exec returns: the shutdown request
		// is never read, so only the timeout can end the machine.
		mustMachine(t, home, "exec", "m1", "--", "sh", "-c",
			"mkdir -p /sys/fs/cgroup && (mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup) && "+
				"mkdir -p /sys/fs/cgroup/frozen && echo 1 > /sys/fs/cgroup/frozen/cgroup.procs && "+
				"(sleep 1; echo 1 > /sys/fs/cgroup/frozen/cgroup.freeze) >/dev/null 2>&1 &")
		time.Sleep(2 * time.Second)
		start := time.Now()
		code, _, stderr := machineCLI(t, home, "stop", "--timeout", "2s", "m1")
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("stop: exit %d, %q", code, stderr)
		}
		// Under 2 s would mean the agent did answer: the guest did not
		// freeze it, and the test proved nothing.
		if took < 2*time.Second || took > 3500*time.Millisecond {
			t.Errorf("stop --timeout 2s took %v, want 2 to 3.5 s", took)
		}
		if s := machineStatus(t, home, "m1"); s.State != "stopped" {
			t.Errorf("after a timed-out stop: %s", s.State)
		}
		startMachine(t, home, "m1")
		if out := mustMachine(t, home, "exec", "m1", "--", "cat", "/root/f"); out != "persisted\n" {
			t.Errorf("after the forced stop the file holds %q", out)
		}
	})

	code, _, stderr = machineCLI(t, home, "rm", "m1")
	if code == 0 || !strings.Contains(stderr, "running") {
		t.Errorf("rm of a running machine: exit %d, stderr %q", code, stderr)
	}
	mustMachine(t, home, "stop", "m1")
	mustMachine(t, home, "rm", "m1")
	if des, _ := os.ReadDir(filepath.Join(home, "machines")); len(des) != 0 {
		t.Errorf("rm left %v", des)
	}
}

// machineOut runs a machine command in a machineStep: its stdout, or an
// error for a non-zero exit (with its stderr) or a stalled guest.
func machineOut(t *testing.T, home string, args ...string) (string, error) {
	t.Helper()
	code, stdout, stderr, err := machineTry(t, home, args...)
	if err == nil && code != 0 {
		err = fmt.Errorf("smol machine %v: exit %d, stderr: %s", args, code, stderr)
	}
	return stdout, err
}

// startCounter starts a loop in the guest that counts into file five
// times a second, waits for its first number and returns it.
func startCounter(t *testing.T, home, name, file string) (int, error) {
	t.Helper()
	loop := fmt.Sprintf("(i=0; while :; do i=$((i+1)); echo $i > %s; sleep 0.2; done) >/dev/null 2>&1 &", file)
	if _, err := machineOut(t, home, "exec", name, "--", "sh", "-c", loop); err != nil {
		return 0, err
	}
	for i := 0; ; i++ {
		n, err := readCounter(t, home, name, file)
		if !errors.Is(err, os.ErrNotExist) || i == 50 {
			return n, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readCounter reads a counter file in the guest; an error that wraps
// os.ErrNotExist when the file is not there (yet).
func readCounter(t *testing.T, home, name, file string) (int, error) {
	t.Helper()
	out, err := machineOut(t, home, "exec", name, "--", "sh", "-c", "test -s "+file+" && cat "+file+" || echo absent")
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(out) == "absent" {
		return 0, fmt.Errorf("%s in machine %s: %w", file, name, os.ErrNotExist)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("counter %s holds %q", file, out)
	}
	return n, nil
}

func counter(t *testing.T, home, name string) int {
	t.Helper()
	return counterFile(t, home, name, "/tmp/counter")
}

// waitCounter waits for a counter loop to have written its file once.
func waitCounter(t *testing.T, home, name, file string) {
	t.Helper()
	for i := 0; i < 50; i++ {
		if code, _, _ := machineCLI(t, home, "exec", name, "--", "test", "-s", file); code == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", file)
}

func counterFile(t *testing.T, home, name, file string) int {
	t.Helper()
	out := mustMachine(t, home, "exec", name, "--", "cat", file)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("counter %q", out)
	}
	return n
}

// Bulk sizes: what the persistent-machines issue names (a 20 MiB cp, a
// 50 MiB stream). The box's nested KVM sometimes gives way under sustained
// vsock load (README, known issue: guests die or stall, and so do QEMU's);
// machineStep restarts a machine whose guest died or stalled and runs the
// step again, logged as KNOWN ISSUE. SMOL_SMALL_BULK=1 moves 4 MiB instead,
// for a quick run.
func bulkMiB(full int) int {
	if os.Getenv("SMOL_SMALL_BULK") == "1" {
		return 4
	}
	return full
}

// machineTry runs a machine command that may meet a stalled guest: it is
// cut after stepTimeout and reported as hung.
func machineTry(t *testing.T, home string, args ...string) (code int, stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, artifact(t, "bin/smol", "build"), append([]string{"machine"}, args...)...)
	cmd.WaitDelay = commandWaitDelay
	cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return 0, o.String(), e.String(), &guestStalled{fmt.Sprintf("smol machine %v did not finish within %v", args, stepTimeout)}
	}
	if ee, ok := runErr.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String(), nil
	} else if runErr != nil {
		t.Fatal(runErr)
	}
	return 0, o.String(), e.String(), nil
}

const stepTimeout = 90 * time.Second

// guestStalled is a step cut short because the machine's guest stopped
// answering.
type guestStalled struct{ msg string }

func (e *guestStalled) Error() string { return e.msg }

// machineStep runs a step through the guest agent. When the machine's
// guest died meanwhile of one of the box's known failures (boxGuestDeath:
// README, known issue) or stalled (the step hung), the machine is started
// again and the step retried, as retryIfGuestDies does for one-shot
// guests. A wrong result from a live guest is never retried; its error
// comes with the machine's VMM log and console.
func machineStep(t *testing.T, home, name string, step func() error) {
	t.Helper()
	retryIfGuestDies(t, func() error {
		err := step()
		if err == nil {
			return nil
		}
		var stalled *guestStalled
		if errors.As(err, &stalled) {
			// A stalled guest (the box's other known failure): stop it
			// hard and start it again.
			machineCLI(t, home, "stop", "--timeout", "2s", name)
			startMachine(t, home, name)
			return &guestDied{msg: stalled.msg}
		}
		for i := 0; i < 50; i++ { // the VMM records the crash as it exits
			s := machineStatus(t, home, name)
			if death := boxGuestDeath(home, name, s); death != "" {
				startMachine(t, home, name)
				return &guestDied{msg: death}
			}
			if s.State == "running" && i >= 10 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("%w%s", err, machineLogs(home, name, 0))
	})
}

// boxGuestDeath describes how machine name's guest died if it died of one
// of the box's known failures, "" otherwise:
//
//   - a silent triple fault, which KVM reports with the registers of the
//     reset state (rip=0xfff0): the machine failed;
//   - a kernel panic, "Fatal exception in interrupt", after a loop of page
//     faults at restore_regs_and_return_to_kernel (the iretq back to
//     kernel mode), the loop the box's own kernel dies of (README, known
//     issue; BENCHMARKS.md, "Guest failures"), where no VMM of ours is
//     involved: the guest kernel then reboots, which stops the machine.
func boxGuestDeath(home, name string, s smol.MachineStatus) string {
	switch s.State {
	case "failed":
		if strings.Contains(s.Error, "triple-faulted") && strings.Contains(s.Error, "rip=0xfff0 ") {
			return s.Error
		}
	case "stopped":
		b, _ := os.ReadFile(filepath.Join(home, "machines", name, machine.ConsoleLog))
		// Only the last boot's console counts: the log spans restarts.
		boot := string(b)
		if i := strings.LastIndex(boot, "smol: starting machine "+name+" at "); i >= 0 {
			boot = boot[i:]
		}
		ended := strings.Contains(boot, "smol: machine "+name+" ended at ") && strings.HasSuffix(strings.TrimSpace(boot), ": reboot")
		if ended && strings.Contains(boot, "Kernel panic - not syncing: Fatal exception in interrupt") &&
			strings.Contains(boot, "? exc_page_fault") && strings.Contains(boot, "? restore_regs_and_return_to_kernel") {
			return "the guest kernel panicked after a loop of page faults at its iretq, and rebooted"
		}
	}
	return ""
}

// cpuTicks is the CPU time (user+system, in clock ticks) of every thread
// of process pid.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from the 3rd on
		u, _ := strconv.Atoi(f[11])
		k, _ := strconv.Atoi(f[12])
		total += u + k
	}
	return total
}

func TestMachineBadInput(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"start", "nope"}, "no such machine"},
		{[]string{"create", "bad/name", "--image", "x"}, "machine name"},
		{[]string{"create", "..", "--image", "x"}, "machine name"},
		{[]string{"create", strings.Repeat("a", 200), "--image", "x"}, "at most"},
		{[]string{"create", "x\x1b[2J", "--image", "x"}, `\x1b`},
		{[]string{"stop", "nope", "--timeout", "-1s"}, "negative"},
		{[]string{"exec", "nope", "--", "true"}, "no such machine"},
	} {
		code, _, stderr := machineCLI(t, home, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("smol machine %q: exit %d, stderr %q, want one line with %q", c.args, code, stderr, c.want)
		}
	}
	// A damaged record is reported, not replaced.
	ref := machineImage(t)
	createMachine(t, home, "dmg", ref)
	cfg := filepath.Join(home, "machines", "dmg", "config.json")
	os.WriteFile(cfg, []byte("{garbage"), 0o600)
	code, _, stderr := machineCLI(t, home, "start", "dmg")
	if code == 0 || !strings.Contains(stderr, "damaged") {
		t.Errorf("start of a damaged machine: exit %d, stderr %q", code, stderr)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "{garbage" {
		t.Errorf("the damaged record was rewritten: %q", b)
	}
}

// The Go API drives the same lifecycle without the CLI.
func TestMachineGoAPI(t *testing.T) {
	home := t.TempDir()
	t.Setenv("SMOL_HOME", home)
	smol.VMMExecutable = artifact(t, "bin/smol", "build")
	ctx := context.Background()
	if _, err := smol.CreateMachine(ctx, smol.MachineConfig{Name: "api", Image: machineImage(t), Hostname: "no_such-host"}); err == nil {
		t.Fatal("a machine named no_such-host in its guest was created")
	}
	m, err := smol.CreateMachine(ctx, smol.MachineConfig{Name: "api", Image: machineImage(t), CPUs: 1, Memory: 256 << 20, Storage: 1 << 30,
		Hostname: "api-host.example"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Remove(ctx, true)
	// A guest that dies while booting (the box's known failure) gets one
	// more try, logged, as startMachine gives the CLI's.
	err = m.Start(ctx)
	if err != nil && strings.Contains(err.Error(), "did not start") {
		t.Logf("KNOWN ISSUE: machine api did not start, once more: %v", err)
		err = m.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code, err := m.Exec(ctx, smol.Command{Args: []string{"sh", "-c", "echo api > /root/g; cat /root/g; hostname; exit 3"}, Stdout: &out})
	if err != nil || code != 3 || out.String() != "api\napi-host.example\n" {
		t.Errorf("Exec: %d %v %q", code, err, out.String())
	}
	// Started is called while the command runs, started directly or
	// through the launcher (capability sets go through it): the command
	// waits for a line sent only once Started was called. A command that
	// cannot start, or whose launcher fails, never reports it.
	someCaps := &smol.Capabilities{Bounding: []uint8{0, 21}, Effective: []uint8{0, 21}, Permitted: []uint8{0, 21}}
	for _, c := range []struct {
		name    string
		args    []string
		caps    *smol.Capabilities
		code    int
		started bool
	}{
		{"direct", []string{"sh", "-c", "read x; echo $x"}, nil, 0, true},
		{"through the launcher", []string{"sh", "-c", "read x; echo $x"}, someCaps, 0, true},
		{"missing", []string{"no-such-program"}, nil, 127, false},
		{"launcher failing", []string{"true"}, &smol.Capabilities{Ambient: []uint8{21}}, 126, false},
	} {
		stdin, feed := io.Pipe()
		started := make(chan struct{})
		var out strings.Builder
		code, err := m.Exec(ctx, smol.Command{Args: c.args, Capabilities: c.caps, Stdin: stdin, Stdout: &out,
			Started: func() {
				close(started)
				go func() { io.WriteString(feed, "after-start\n"); feed.Close() }()
			}})
		feed.Close()
		seen := false
		select {
		case <-started:
			seen = true
		default:
		}
		if code != c.code || seen != c.started || c.started && (err != nil || out.String() != "after-start\n") {
			t.Errorf("%s: Exec = %d, %v, stdout %q, Started called: %v (want %d, %v)", c.name, code, err, out.String(), seen, c.code, c.started)
		}
	}
	// Pause and resume 100 times while a command streams: nothing lost.
	lines := &firstWrite{started: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := m.Exec(ctx, smol.Command{Args: []string{"sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo $i; i=$((i+1)); done"}, Stdout: lines})
		done <- err
	}()
	select { // exec is refused while paused: let it start first
	case <-lines.started:
	case err := <-done:
		t.Fatalf("the streaming exec ended at once: %v", err)
	}
	for i := 0; i < 100; i++ {
		if err := m.Pause(ctx); err != nil {
			t.Fatalf("pause %d: %v", i, err)
		}
		if err := m.Resume(ctx); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(lines.String())
	if len(got) != 3000 || got[0] != "0" || got[2999] != "2999" {
		t.Errorf("streamed through 100 pauses: %d lines", len(got))
	} else {
		for i, l := range got {
			if l != strconv.Itoa(i) {
				t.Errorf("line %d is %q", i, l)
				break
			}
		}
	}
	if err := m.Stop(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code, err := m.Exec(ctx, smol.Command{Args: []string{"cat", "/root/g"}, Stdout: &out}); err != nil || code != 0 || out.String() != "api\n" {
		t.Errorf("after restart: %d %v %q", code, err, out.String())
	}
	if err := m.Remove(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := smol.OpenMachine("api"); err == nil {
		t.Error("the machine is still there after Remove")
	}
}

// Exec has run's semantics: stdin, a terminal, a 50 MiB stream beside
// another command, and signals sent to the CLI reaching the command.
func TestMachineExecStreams(t *testing.T) {
	home := t.TempDir()
	createMachine(t, home, "ex", machineImage(t))
	startMachine(t, home, "ex")

	code, out, _, _ := smolRunOnce(t, home, []byte("from stdin\n"), true, "machine", "exec", "ex", "-i", "--", "cat")
	if code != 0 || out != "from stdin\n" {
		t.Errorf("-i: exit %d, %q", code, out)
	}
	code, out, _, _ = smolRunOnce(t, home, nil, false, "machine", "exec", "ex", "-t", "--", "tty")
	if code != 0 || !strings.HasPrefix(out, "/dev/pts/") {
		t.Errorf("-t: exit %d, %q", code, out)
	}

	// 50 MiB to stdout while another exec runs: a 1 MiB file, 50 times.
	line := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n"
	mib := bulkMiB(50)
	want := sha256.Sum256([]byte(strings.Repeat(line, 1024*16*mib)))
	machineStep(t, home, "ex", func() error {
		// Made in the step: a guest that died loses what it had not
		// written back to its storage disk.
		mk := "i=0; while [ $i -lt 1024 ]; do echo " + strings.TrimSuffix(line, "\n") + "; i=$((i+1)); done > /tmp/kib64; i=0; while [ $i -lt 16 ]; do cat /tmp/kib64; i=$((i+1)); done > /tmp/mib"
		if code, _, stderr := machineCLI(t, home, "exec", "ex", "--", "sh", "-c", mk); code != 0 {
			return fmt.Errorf("making /tmp/mib: exit %d, %s", code, stderr)
		}
		beside := make(chan error, 1)
		go func() {
			code, out, stderr, err := machineTry(t, home, "exec", "ex", "--", "sh", "-c", "sleep 1; echo beside")
			if err != nil {
				beside <- err
				return
			}
			if code != 0 || out != "beside\n" {
				beside <- fmt.Errorf("the exec beside the stream: exit %d, %q, %s", code, out, stderr)
				return
			}
			beside <- nil
		}()
		code, out, stderr, err := machineTry(t, home, "exec", "ex", "--", "sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do cat /tmp/mib; i=$((i+1)); done", mib))
		berr := <-beside
		if err != nil {
			return err
		}
		if code != 0 || len(out) != mib<<20 || sha256.Sum256([]byte(out)) != want {
			return fmt.Errorf("%d MiB stream: exit %d, %d bytes, stderr %q", mib, code, len(out), stderr)
		}
		return berr
	})

	// SIGTERM to the CLI reaches the command, which reports it.
	cmd := exec.Command(artifact(t, "bin/smol", "build"), "machine", "exec", "ex", "--", "sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done")
	cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stdout)
	if l, _ := br.ReadString('\n'); l != "ready\n" {
		t.Fatalf("first line %q", l)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(br)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || string(rest) != "got-term\n" {
		t.Errorf("SIGTERM: %v, output %q", err, rest)
	}
}

// Five machines at once are separate: a file one writes is not in the
// others, and ls --json lists them all running.
func TestFiveMachines(t *testing.T) {
	home := t.TempDir()
	ref := machineImage(t)
	names := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, n := range names {
		createMachine(t, home, n, ref)
	}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() { defer wg.Done(); startMachine(t, home, n) }()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	mustMachine(t, home, "exec", "a3", "--", "sh", "-c", "echo mine > /root/only-a3")
	for _, n := range names {
		code, out, _ := machineCLI(t, home, "exec", n, "--", "cat", "/root/only-a3")
		if (n == "a3") != (code == 0) || n == "a3" && out != "mine\n" {
			t.Errorf("%s: cat /root/only-a3: exit %d, %q", n, code, out)
		}
	}
	var list []smol.MachineStatus
	if err := json.Unmarshal([]byte(mustMachine(t, home, "ls", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	for i, s := range list {
		if s.Name != names[i] || s.State != "running" || s.PID == 0 || pids[s.PID] {
			t.Errorf("ls --json row %d: %+v", i, s)
		}
		pids[s.PID] = true
	}
	if len(list) != 5 {
		t.Errorf("ls --json lists %d machines", len(list))
	}
}

// firstWrite collects output and says when the first byte came.
type firstWrite struct {
	mu      sync.Mutex
	b       strings.Builder
	started chan struct{}
	once    sync.Once
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.started) })
	return w.b.Write(p)
}

func (w *firstWrite) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A machine created without an image runs in smol's busybox root, and its
// files persist like any machine's.
func TestMachineWithoutImage(t *testing.T) {
	home := t.TempDir()
	mustMachine(t, home, "create", "bb", "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "bb") })
	if s := machineStatus(t, home, "bb"); s.Image != "smol:busybox" {
		t.Errorf("image %q, want smol:busybox", s.Image)
	}
	startMachine(t, home, "bb")
	if got := guestPCATCompat(t, home, "bb"); got != "1" { // DefaultIRQChip is the in-kernel one
		t.Errorf("the default irqchip's MADT says PCAT_COMPAT %q, want 1 (the in-kernel PICs)", got)
	}
	mustMachine(t, home, "exec", "bb", "--", "sh", "-c", "echo kept > /root/x")
	mustMachine(t, home, "stop", "bb")
	startMachine(t, home, "bb")
	if out := mustMachine(t, home, "exec", "bb", "--", "cat", "/root/x"); out != "kept\n" {
		t.Errorf("after a restart /root/x holds %q", out)
	}
	mustMachine(t, home, "stop", "bb")
}

// A machine created --in-memory boots into its initramfs, with no disks:
// its files start afresh at every start, and what needs a root disk is
// refused with one line.
func TestMachineInMemory(t *testing.T) {
	home := t.TempDir()
	for _, bad := range [][]string{{"--image", "x"}, {"--storage", "1G"}} {
		args := append([]string{"create", "bad", "--in-memory"}, bad...)
		if code, _, stderr := machineCLI(t, home, args...); code == 0 || !strings.Contains(stderr, "exclude each other") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("smol machine %q: exit %d, stderr %q", args, code, stderr)
		}
	}
	mustMachine(t, home, "create", "mem", "--in-memory", "--cpus", "1", "--mem", "256M")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "mem") })
	if s := machineStatus(t, home, "mem"); s.Image != smol.InMemoryRoot {
		t.Errorf("image %q, want %q", s.Image, smol.InMemoryRoot)
	}
	startMachine(t, home, "mem")
	// No disk at all, and "/" is the initramfs (rootfs), not an overlay.
	out := mustMachine(t, home, "exec", "mem", "--", "sh", "-c", "ls /sys/block | grep -c ^vd; awk '$2 == \"/\" {print $3}' /proc/mounts; echo gone > /root/x")
	if out != "0\nrootfs\n" {
		t.Errorf("disks and root filesystem: %q, want no vd* disk and rootfs", out)
	}
	if _, err := os.Stat(filepath.Join(home, "machines", "mem", "storage.ext4")); !os.IsNotExist(err) {
		t.Errorf("a writable layer was made: %v", err)
	}
	for _, args := range [][]string{{"snapshot", "mem", "-o", filepath.Join(t.TempDir(), "s")}, {"fork", "mem"}} {
		if code, _, stderr := machineCLI(t, home, args...); code == 0 || !strings.Contains(stderr, "runs in memory") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("smol machine %q: exit %d, stderr %q", args, code, stderr)
		}
	}
	mustMachine(t, home, "stop", "mem")
	startMachine(t, home, "mem")
	if out := mustMachine(t, home, "exec", "mem", "--", "sh", "-c", "cat /root/x 2>/dev/null || echo absent"); out != "absent\n" {
		t.Errorf("after a restart /root/x: %q, want it gone", out)
	}
	mustMachine(t, home, "stop", "mem")
}

// guestPCATCompat is the PCAT_COMPAT flag of the MADT the guest booted
// with (byte 40, bit 0: "the machine also has dual 8259 PICs"): 1 with
// the in-kernel irqchip, 0 with the split one, whose platform has none.
func guestPCATCompat(t *testing.T, home, name string) string {
	t.Helper()
	out := mustMachine(t, home, "exec", name, "--", "dd", "if=/sys/firmware/acpi/tables/APIC", "bs=1", "skip=40", "count=1", "status=none")
	if len(out) != 1 {
		t.Fatalf("byte 40 of the guest's MADT read as %q", out)
	}
	return fmt.Sprint(out[0] & 1)
}

// TestMachineSplitIRQChip: a machine created with --irqchip split boots
// with smol's own I/O APIC, and keeps it in a fork's child (restored from
// the parent's state) and in a cold start after a stop.
func TestMachineSplitIRQChip(t *testing.T) {
	home := t.TempDir()
	mustMachine(t, home, "create", "sp", "--irqchip", "split", "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "sp") })
	if s := machineStatus(t, home, "sp"); s.IRQChip != "split" {
		t.Errorf("status says irqchip %q, want split", s.IRQChip)
	}
	startMachine(t, home, "sp")
	if got := guestPCATCompat(t, home, "sp"); got != "0" {
		t.Errorf("the split irqchip's MADT says PCAT_COMPAT %q, want 0", got)
	}
	kids := strings.Fields(mustMachine(t, home, "fork", "sp", "--count", "1", "--name-prefix", "spkid"))
	for _, k := range kids {
		t.Cleanup(func() { machineCLI(t, home, "rm", "-f", k) })
	}
	if len(kids) != 1 {
		t.Fatalf("fork printed %q", kids)
	}
	if out := mustMachine(t, home, "exec", kids[0], "--", "sh", "-c", "echo child"); out != "child\n" {
		t.Errorf("the split-irqchip child answered %q", out)
	}
	if s := machineStatus(t, home, kids[0]); s.IRQChip != "split" {
		t.Errorf("the child's status says irqchip %q, want split", s.IRQChip)
	}
	mustMachine(t, home, "rm", "-f", kids[0])
	mustMachine(t, home, "stop", "sp")
	startMachine(t, home, "sp")
	if got := guestPCATCompat(t, home, "sp"); got != "0" {
		t.Errorf("after a cold start the MADT says PCAT_COMPAT %q, want 0", got)
	}
}

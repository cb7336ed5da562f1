package box

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/smolvm/smol/guest/initramfs"
)

// Options configure one box session.
type Options struct {
	Dir    string    // working directory inside the box (a host path); default: the current one
	Env    []string  // environment of the command; default: os.Environ()
	Stdout io.Writer // the box's console; default os.Stdout
	CPUs   int       // default 1, or $SMOLBOX_CPUS (defaultCPUs)
	Memory string    // QEMU -m syntax; default "6G"
	// Log, if set, receives QEMU's own diagnostics.
	Log io.Writer
	// Watchdog ends a box that has shown no sign of life (no heartbeat
	// from its init, no console output), or whose 9p share has not
	// answered, for this long (life.go). 0: $SMOLBOX_WATCHDOG, else
	// 120 s; negative: no watchdog.
	Watchdog time.Duration
	// Timeout ends a box whose command has not finished this long after
	// the box started (waiting for another box to finish does not
	// count). 0: $SMOLBOX_TIMEOUT, else none; negative: none.
	Timeout time.Duration
	// Stalled, if set, is asked every second whether the command has
	// stopped making progress in a box that is otherwise alive (began:
	// when this box started, after any wait for another box); an answer
	// other than "" ends the box as hung (ErrBoxHung), with that answer
	// first in its report. Main sets it for test binaries (progress.go).
	Stalled func(began, now time.Time) string

	// started, if set, is called once QEMU runs and its monitor answers
	// (tests freeze boxes with it).
	started func(*running)
}

// running is a started box as its test hook sees it.
type running struct {
	pid     int
	monitor *qmp
	life    *life
}

// ErrBoxCrashed reports a box that ended before its command did: its own
// kernel crashed or reset (see README, known issue), not the command.
var ErrBoxCrashed = errors.New("the box ended without the command's status")

// ErrBoxKernelBug reports a box whose own kernel reported a BUG during the
// run: the box's known crash (its emulated SVM gives way, and its kernel
// takes a page-fault loop, "stack guard page was hit"), which stops or
// kills whichever process was on that CPU, usually a VMM, and often leaves
// the box running on a damaged kernel. The box is ended a few seconds after
// the BUG line (bugGrace); a command that failed, or did not finish, then
// says nothing about the command.
var ErrBoxKernelBug = errors.New("the box's own kernel reported a BUG during the run")

// ErrBoxHung reports a box that its watchdog ended: it showed no sign of
// life, or its 9p share did not answer, for the watchdog period (see
// README, known issue). Like a crash, it says nothing about the command.
var ErrBoxHung = errors.New("the box hung")

// ErrTimeout reports a command that had not finished when the box's
// Timeout (SMOLBOX_TIMEOUT) ran out; the box itself was alive.
var ErrTimeout = errors.New("the box's command did not finish in time")

// ErrUnavailable reports that the box cannot start here.
var ErrUnavailable = errors.New("the test box is not available")

// reportError is a hung or timed-out box, with what the harness could
// find out about it; it matches its sentinel with errors.Is.
type reportError struct {
	kind error // ErrBoxHung or ErrTimeout
	msg  string
}

func (e *reportError) Error() string        { return e.msg }
func (e *reportError) Is(target error) bool { return target == e.kind }

// Paths the box needs, found relative to the repository root.
const (
	kernelPath = "build/box-vmlinux"
	// guestKernelPath is smol's guest kernel, whose symbols name where a
	// vCPU running a nested guest is, in a hang report.
	guestKernelPath = "build/vmlinux"
	busyboxPath     = "/bin/busybox"
	qemuBinary      = "qemu-system-x86_64"
)

// Run runs script with /bin/sh inside a fresh box and returns its exit status.
// The box shares the host's root filesystem, so script sees this checkout at
// the same path and its writes persist.
func Run(ctx context.Context, script string, opts Options) (int, error) {
	kernel, err := Kernel()
	if err != nil {
		return -1, err
	}
	qemu, err := findEmulator()
	if err != nil {
		return -1, err
	}
	if _, err := os.Stat(busyboxPath); err != nil {
		return -1, fmt.Errorf("%w: %s not found (apt-get install busybox-static)", ErrUnavailable, busyboxPath)
	}
	if opts.Dir == "" {
		if opts.Dir, err = os.Getwd(); err != nil {
			return -1, err
		}
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.CPUs == 0 {
		opts.CPUs = defaultCPUs()
	}
	if opts.Memory == "" {
		opts.Memory = "6G"
	}
	if opts.Watchdog, err = limit(opts.Watchdog, "SMOLBOX_WATCHDOG", defaultWatchdog); err != nil {
		return -1, err
	}
	if opts.Watchdog > 0 && opts.Watchdog < minWatchdog {
		return -1, fmt.Errorf("box watchdog %v: at least %v (it must outlast a few of the box's %v heartbeats)", opts.Watchdog, minWatchdog, beatPeriod)
	}
	if opts.Timeout, err = limit(opts.Timeout, "SMOLBOX_TIMEOUT", 0); err != nil {
		return -1, err
	}

	// The job directory is on the host and therefore also in the box.
	job, err := os.MkdirTemp("", "smolbox-")
	if err != nil {
		return -1, err
	}
	defer os.RemoveAll(job)
	if err := os.WriteFile(filepath.Join(job, "run.sh"), []byte(jobScript(script, opts)), 0o755); err != nil {
		return -1, err
	}
	initrd := filepath.Join(job, "initrd.cpio")
	if err := writeInitramfs(initrd); err != nil {
		return -1, err
	}
	// QEMU connects to these two at its start: no race with a listener
	// that QEMU would have to create first.
	lifeSock, monitorSock := filepath.Join(job, "life.sock"), filepath.Join(job, "qmp.sock")
	lifeL, err := net.Listen("unix", lifeSock)
	if err != nil {
		return -1, fmt.Errorf("box life port: %w", err)
	}
	defer lifeL.Close()
	monitorL, err := net.Listen("unix", monitorSock)
	if err != nil {
		return -1, fmt.Errorf("box monitor: %w", err)
	}
	defer monitorL.Close()

	release, err := acquireLock(ctx, os.Stderr)
	if err != nil {
		return -1, err
	}
	defer release()

	var qemuLog bytes.Buffer
	logw := io.Writer(&qemuLog)
	if opts.Log != nil {
		logw = io.MultiWriter(&qemuLog, opts.Log)
	}
	began := time.Now()
	b := &session{kernel: kernel, life: newLife(began)}
	b.console = &consoleTail{w: opts.Stdout, life: b.life}
	cmd := exec.Command(qemu.binary, append(qemu.args, qemuArgs(kernel, initrd, job, lifeSock, monitorSock, opts)...)...)
	cmd.Env = append(os.Environ(), qemu.env...)
	cmd.Stdin = nil
	cmd.Stdout = b.console
	cmd.Stderr = logw
	// A harness that is killed (go test's own timeout, say) must not
	// leave a box behind that runs on, or hangs, with no one to end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("box: start %s: %w", qemu.binary, err)
	}
	defer b.close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	go b.acceptLife(lifeL)
	go b.acceptMonitor(monitorL, cmd.Process.Pid, opts.started)

	if code, ended, err := b.watch(ctx, cmd.Process, exited, opts, began); ended {
		return code, err
	}
	status, err := os.ReadFile(filepath.Join(job, "status"))
	if err != nil {
		if code, ok := b.life.exitStatus(); ok {
			// The command finished and said so over the life port;
			// the box failed after it, writing the status file.
			fmt.Fprintf(os.Stderr, "box: the box ended before it wrote the command's status file; the status (%d) came over its life port\n", code)
			return code, nil
		}
		if ctx.Err() != nil {
			return -1, fmt.Errorf("interrupted: %w", ctx.Err())
		}
		return -1, fmt.Errorf("%w (qemu: %v): %s", ErrBoxCrashed, b.qemuExit, lastLine(qemuLog.String()))
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(status)))
	if err != nil {
		return -1, fmt.Errorf("box: bad status file %q", status)
	}
	if bug := b.console.kernelBug(); code != 0 && bug != "" {
		return code, fmt.Errorf("%w: %s", ErrBoxKernelBug, bug)
	}
	return code, nil
}

// limit is a duration from opts, else from the environment variable env
// (a Go duration such as 90s or 30m, or whole seconds; 0 or "off" for
// none), else def. Negative means none.
func limit(fromOpts time.Duration, env string, def time.Duration) (time.Duration, error) {
	if fromOpts != 0 {
		return fromOpts, nil
	}
	v := strings.TrimSpace(os.Getenv(env))
	switch v {
	case "":
		return def, nil
	case "0", "off", "none":
		return -1, nil
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 120s or 30m (or off)", env, v)
	}
	return d, nil
}

// qemuArgs is the box's virtual machine: QEMU's microvm with its software
// CPU (TCG, multi-threaded) presenting an AMD EPYC with SVM, so the box
// kernel's kvm_amd gives real KVM to the command.
func qemuArgs(kernel, initrd, job, lifeSock, monitorSock string, opts Options) []string {
	return []string{
		"-M", "microvm,rtc=on,acpi=off",
		"-accel", "tcg,thread=multi",
		"-cpu", boxCPU(),
		"-smp", strconv.Itoa(opts.CPUs),
		"-m", opts.Memory,
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "stdio",
		"-kernel", kernel,
		"-initrd", initrd,
		"-append", boxCmdline(job),
		"-fsdev", "local,id=hostroot,path=/,security_model=passthrough,multidevs=remap",
		"-device", "virtio-9p-device,fsdev=hostroot,mount_tag=hostroot",
		// The life port (life.go) and the monitor (qmp.go).
		"-chardev", "socket,id=life,path=" + qemuOptValue(lifeSock),
		"-device", "virtio-serial-device",
		"-device", "virtserialport,chardev=life,name=" + lifePort,
		"-chardev", "socket,id=qmp,path=" + qemuOptValue(monitorSock),
		"-mon", "chardev=qmp,mode=control",
	}
}

// qemuOptValue escapes a value for QEMU's option syntax, where a comma
// ends it unless doubled.
func qemuOptValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// boxCPU is the CPU model QEMU presents to the box: an AMD EPYC with SVM,
// or $SMOLBOX_QEMU_CPU (QEMU -cpu syntax), to try other emulated features.
func boxCPU() string {
	if cpu := os.Getenv("SMOLBOX_QEMU_CPU"); cpu != "" {
		return cpu
	}
	return "EPYC,+svm"
}

// boxCmdline is the box kernel's command line. $SMOLBOX_APPEND adds
// parameters, to try kernel or KVM settings (kvm_amd.npt=0, say) without a
// rebuild.
//
// no_timer_check: at boot the kernel checks that the IO-APIC timer ticks,
// by counting jiffies across a TSC-timed delay, and panics when they did
// not advance ("IO-APIC + timer doesn't work!"). On a busy host QEMU's
// software CPU runs the delay but delivers the ticks late, and the box
// died that way at boot while fuzzers and a kernel build ran. Kernels on
// KVM skip the check for the same reason (kvmclock sets it); the box runs
// under TCG, so it says so itself.
func boxCmdline(job string) string {
	params := strings.Join([]string{"console=ttyS0", verbosity(), tscParams(), "no_timer_check", os.Getenv("SMOLBOX_APPEND"),
		"panic=-1", "reboot=t", "smolbox.job=" + job,
		fmt.Sprintf("smolbox.beat=%d", beatPeriod/time.Second)}, " ")
	return strings.Join(strings.Fields(params), " ")
}

// verbosity keeps the box kernel quiet, except for the critical messages
// of a box that crashes (panics, BUG lines), unless SMOLBOX_DEBUG is set,
// in which case all its messages show why a box did not come up.
func verbosity() string {
	if os.Getenv("SMOLBOX_DEBUG") != "" {
		return "loglevel=7"
	}
	return "quiet loglevel=2"
}

// jobScript sets the command's environment and directory, then runs it.
func jobScript(script string, opts Options) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, kv := range opts.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validEnvName(k) {
			continue
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	b.WriteString("export SMOL_IN_BOX=1\n")
	// Temporary files go to the box's own tmpfs: the host's files reach the
	// box over 9p, where Unix sockets cannot be created.
	b.WriteString("export TMPDIR=/dev/shm\n")
	fmt.Fprintf(&b, "cd %s || exit 125\n", shellQuote(opts.Dir))
	b.WriteString(script)
	b.WriteString("\n")
	return b.String()
}

func writeInitramfs(path string) error {
	a := initramfs.New()
	a.AddFile("init", []byte(initScript), 0o755)
	if err := a.AddBusybox(busyboxPath, busyboxApplets...); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return a.WriteFile(path)
}

// Kernel returns the box kernel's path: $SMOL_BOX_KERNEL, or
// build/box-vmlinux in this repository.
func Kernel() (string, error) {
	if k := os.Getenv("SMOL_BOX_KERNEL"); k != "" {
		return k, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	k := filepath.Join(root, kernelPath)
	if _, err := os.Stat(k); err != nil {
		return "", fmt.Errorf("%w: no box kernel at %s (run 'make box-kernel')", ErrUnavailable, k)
	}
	return k, nil
}

// RepoRoot finds the smol checkout containing the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(data, []byte("module github.com/smolvm/smol\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the smol repository")
		}
		dir = parent
	}
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no diagnostics"
	}
	return s
}

// defaultCPUs is the box's vCPU count: $SMOLBOX_CPUS, else 1. A box with
// two vCPUs (the machines here have 2 cores) crashes its own kernel
// often under nested guests, an interrupt taken where QEMU's SVM
// emulation must hold it off (BENCHMARKS.md, "Where the box kernel's
// stack guard page BUG starts"); a box with one never did, and the hang it
// showed instead, a lost wake-up, the harness undoes (wakeup.go).
func defaultCPUs() int {
	if n, err := strconv.Atoi(os.Getenv("SMOLBOX_CPUS")); err == nil && n > 0 && n <= 64 {
		return n
	}
	return 1
}

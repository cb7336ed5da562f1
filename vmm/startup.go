package vmm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The VMM's start-up, from the program's start to the first KVM_RUN, is
// most of what a microVM's boot costs outside the guest. Two things here
// keep it honest: a trace of its phases, and giving back the pages that
// only start-up needed.

// startupTraceEnv names the environment variable that, set to 1, makes the
// VMM print each start-up phase on stderr with the milliseconds since the
// program's packages were initialised and the wall clock: how bench/boot's
// figures are taken apart, and (the clock lining up the processes
// involved: the CLI, the parent's VMM, each child's) a fork's. A machine's
// VMM process inherits it from the command that started it, and its
// stderr is the machine's vmm.log.
const startupTraceEnv = "SMOL_STARTUP_TRACE"

var (
	programStart = time.Now() // package initialisation, close to exec
	tracing      = os.Getenv(startupTraceEnv) == "1"
	traceMu      sync.Mutex
	traceOut     io.Writer = os.Stderr // under traceMu
)

// TraceTo sends the trace to w instead of stderr: for a program whose
// stderr must carry nothing else (containerd reads all that `shim start`
// prints as the shim's address).
func TraceTo(w io.Writer) {
	traceMu.Lock()
	defer traceMu.Unlock()
	traceOut = w
}

// trace prints one start-up phase when tracing is on.
func trace(phase string) {
	if !tracing {
		return
	}
	now := time.Now()
	traceMu.Lock()
	defer traceMu.Unlock()
	fmt.Fprintf(traceOut, "startup: %8.2f ms %s %s\n", float64(now.Sub(programStart).Microseconds())/1000, now.Format("15:04:05.000"), phase)
}

// TracePhase is trace for the VMM's callers (a machine's fork and
// restore), printed when SMOL_STARTUP_TRACE=1.
func TracePhase(format string, args ...any) {
	if tracing {
		trace(fmt.Sprintf(format, args...))
	}
}

// gcPercent is the running VMM's GOGC. A VMM's live heap is small (a
// megabyte or two), so at Go's default of 100 its garbage collector runs
// after every 4 MiB allocated, the heap's floor; a device that allocates
// per request in bulk then pays for a collection and for the runtime's
// returning and refaulting of freed pages every few requests. The 9P
// server allocates a fresh buffer for every Twrite's data (512 KiB at
// smol's msize), which made the Twrite path twice as slow as at 400
// (BENCHMARKS.md, "The VMM's garbage collector and 9P writes"). At 400
// the floor is 16 MiB: a busy VMM's heap may grow that far, and nothing
// changes at the guest's init, before which a VMM allocates less than
// the old floor.
const gcPercent = 400

// DedicatedProcess says that this process exists to run VMs: smol's own
// commands and the VMM processes of named machines set it. Start then
// sets the process's garbage collector for a VMM (gcPercent). A program
// that embeds smol and runs a VM in its own process leaves it false and
// keeps its own GOGC.
var DedicatedProcess bool

var gcOnce sync.Once

// setGCPercent sets gcPercent once per process, unless GOGC says
// otherwise. Start calls it in a DedicatedProcess once the vCPUs run.
func setGCPercent() {
	gcOnce.Do(func() {
		if _, set := os.LookupEnv("GOGC"); !set {
			debug.SetGCPercent(gcPercent)
		}
	})
}

var releaseOnce sync.Once

// releaseStartupPages tells the kernel that this process no longer needs
// the pages of its own executable it has touched so far: code, read-only
// data and the Go runtime's function tables. Start calls it once per
// process, once the vCPUs run.
//
// Why: a VMM binary carries everything its command line can do (image
// pulls, registry and TLS clients, the ext4 writer), and starting it runs
// the package initialisers of all of it, so that smol's resident memory at
// the guest's init was 6.4 MiB of the binary's pages against 1.3 MiB of
// its own. Those pages are clean and file-backed: MADV_DONTNEED only
// unmaps them from this process (they stay in the page cache, shared with
// every other smol process), and the code the running VMM still uses (the
// vCPU loop, the devices, the runtime) faults back in as a minor fault.
// The process's resident memory then is what it works with.
//
// Only read-only mappings of the executable are released: a writable one
// holds data. Nothing is released under a debugger, whose breakpoints live
// in privately modified copies of code pages.
func releaseStartupPages() {
	releaseOnce.Do(func() {
		releaseExecutablePages()
		trace("start-up pages released")
	})
}

// ReleaseIdleMemory gives back what a rare operation of a running VMM (a
// fork, a snapshot) brought in and no longer needs: the executable's
// pages its code faulted in, as releaseStartupPages does at start-up, and
// the heap it freed. A running machine's VMM measured 11.4 MiB outside
// guest RAM before five forks and 16.2 MiB after, 3.4 of it the binary's
// pages.
func ReleaseIdleMemory() {
	releaseExecutablePages()
	debug.FreeOSMemory()
}

// releaseExecutablePages unmaps the read-only pages of this process's
// executable (see releaseStartupPages); not under a debugger.
func releaseExecutablePages() {
	if traced() {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		return
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	for _, r := range executableMappings(maps, st.Dev, st.Ino) {
		// Errors leave the pages where they are, which is harmless.
		unix.Syscall(unix.SYS_MADVISE, uintptr(r.start), uintptr(r.end-r.start), unix.MADV_DONTNEED)
	}
}

type addrRange struct{ start, end uint64 }

// executableMappings returns the read-only mappings of the file (dev, ino)
// in a /proc/PID/maps listing:
//
//	00400000-007eb000 r-xp 00000000 fd:01 1234567   /usr/bin/smol
func executableMappings(maps []byte, dev, ino uint64) []addrRange {
	var out []addrRange
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || strings.Contains(f[1], "w") {
			continue
		}
		if n, err := strconv.ParseUint(f[4], 10, 64); err != nil || n != ino {
			continue
		}
		major, minor, ok := strings.Cut(f[3], ":")
		if !ok {
			continue
		}
		maj, err1 := strconv.ParseUint(major, 16, 32)
		min, err2 := strconv.ParseUint(minor, 16, 32)
		if err1 != nil || err2 != nil || unix.Mkdev(uint32(maj), uint32(min)) != dev {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, addrRange{start, end})
	}
	return out
}

// traced reports whether a debugger is attached to this process.
func traced() bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true // cannot tell: leave everything alone
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}

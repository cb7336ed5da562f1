package box

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// InBox reports whether this process runs inside the box.
func InBox() bool { return os.Getenv("SMOL_IN_BOX") == "1" }

// Main is a TestMain for tests that need a KVM this host may not have:
// guests that boot Linux (runsHere: vmm.HostBootsLinux), or the KVM
// layer's tiny hand-made guests, which need only a /dev/kvm. Where
// runsHere says this host can run them, or inside the box, it runs the
// tests. Otherwise it runs this same test binary, with the same
// arguments, inside a box (whose /dev/kvm is real KVM), and returns its
// exit status: `go test` then runs them on any host.
func Main(m *testing.M, runsHere func() bool) int {
	if InBox() || runsHere() {
		return m.Run()
	}
	fmt.Fprintf(os.Stderr, "box: this host's KVM cannot run these tests; running %s inside the test box (%s)\n", shortName(os.Args[0]), Emulator())
	began := time.Now()
	timeout := testTimeout(os.Args[1:])
	args := verboseArgs(os.Args[1:])
	results := newTestResults()
	opts := Options{
		Stdout:  io.MultiWriter(os.Stdout, results),
		Stalled: func(began, now time.Time) string { return results.silence(began, now, testSilence) },
	}
	code, err := Run(context.Background(), "exec "+commandLine(os.Args[0], args), opts)
	for run := 2; run <= boxRuns; run++ {
		// Known issues: the box's emulated SVM sometimes takes its own
		// kernel down, and a box sometimes hangs (its watchdog ends
		// it). Neither says anything about the tests that were running:
		// run them again, and what has not run yet, in a fresh box. A
		// test whose guest died of the box's known guest failures is
		// run once more too (guestdeath.go).
		var why string
		if boxFailed(err) {
			why = fmt.Sprintf("box: KNOWN ISSUE: %v\n", err)
			if failed := results.failures(); len(failed) > 0 {
				why += fmt.Sprintf("box: failed in that box, so run again: %s\n", strings.Join(failed, " "))
			}
		} else if died := guestDeaths(results, code, err); died != nil {
			for _, name := range sortedKeys(died) {
				why += fmt.Sprintf("box: KNOWN ISSUE: %s failed as its guest died of the box's known guest failure (%.300s); it runs once more\n", name, died[name])
			}
		} else {
			break
		}
		left := time.Duration(0)
		if timeout > 0 {
			if left = timeout - time.Since(began); left < minRerunTime {
				fmt.Fprintf(os.Stderr, "%sbox: only %v of the tests' %v timeout left: no box run %d\n", why, left.Round(time.Second), timeout, run)
				break
			}
		}
		done := results.done()
		again, skipsDone := rerunArgs(args, done, left)
		fmt.Fprint(os.Stderr, why)
		if skipsDone {
			fmt.Fprintf(os.Stderr, "box: running the tests that have not passed in a fresh box (box run %d of %d; %d passed before)\n", run, boxRuns, len(done))
		} else {
			fmt.Fprintf(os.Stderr, "box: running the tests again in a fresh box (box run %d of %d; -test.skip given, so all of them)\n", run, boxRuns)
		}
		results.restart()
		code, err = Run(context.Background(), "exec "+commandLine(os.Args[0], again), opts)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "box: %v\n", err)
		return 1
	}
	return code
}

// guestDeaths returns the tests to run again because their guest died of
// the box's known guest failures (guestDeathReruns), for a box run that
// ended normally with failed tests; nil otherwise.
func guestDeaths(results *testResults, code int, err error) map[string]string {
	if err != nil || code == 0 {
		return nil
	}
	return results.guestDeathReruns()
}

// commandLine quotes a program and its arguments for the box's shell.
func commandLine(program string, args []string) string {
	line := shellQuote(program)
	for _, a := range args {
		line += " " + shellQuote(a)
	}
	return line
}

// boxRuns is how many boxes Main boots, one after another, while the box's
// own kernel crashes or the box hangs under the tests. Each box after the
// first runs only the tests that have not passed, so a crash costs what
// was running when it came, and a few boxes fit in the tests' timeout.
// Eight: on 2026-12-02 the eight-child fork test crashed the box's kernel
// in four boxes in a row, each time a minute or two into its box.
const boxRuns = 8

// minRerunTime is the least time left of the tests' -test.timeout for which
// Main boots another box: less would end in go test's own kill.
const minRerunTime = 5 * time.Minute

// boxFailed reports an error of the box itself, not of what ran in it:
// its kernel crashed or reported a BUG under a failed command, or its
// watchdog found it hung.
func boxFailed(err error) bool {
	return errors.Is(err, ErrBoxCrashed) || errors.Is(err, ErrBoxHung) || errors.Is(err, ErrBoxKernelBug)
}

func shortName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

package box

import (
	"fmt"
	"regexp"
	"time"
)

// The tests' progress.
//
// The box's heartbeats prove that its kernel schedules and that its 9p
// share answers, not that the command makes progress, and a box has been
// seen in a state where they pass while the tests do not: its heartbeat
// loops kept reporting while a test binary, whose every step has its own
// deadline of a minute or two, printed nothing for 14 minutes (QEMU said
// the box was running; one box vCPU halted, the other inside the box
// kernel's APIC write, the tests' threads runnable and not run). Such a
// box would hold a CI run until go test's own timeout. So Main, which
// knows the command is a test binary printing -test.v output, also ends
// a box whose tests have printed nothing of their own for testSilence,
// as hung: the tests that had passed stand, and the rest run again in a
// fresh box. Kernel messages on the console are not the tests' progress,
// so only lines that testing (or a test's log) prints count.

// testSilence is how long a test binary in the box may print nothing of
// its own before its box counts as hung. Every integration test logs
// each step, and each step has a deadline of a few minutes at most (the
// longest, a 3D exec, 3 minutes), so a healthy run is never silent this
// long.
const testSilence = 10 * time.Minute

// testOutput matches a line that a test binary's -test.v output holds:
// testing's own markers, or a test's log line ("    file_test.go:12: ...").
// Like testEnded, it is found anywhere in the line, after whatever the
// console interleaved.
var testOutput = regexp.MustCompile(`=== (RUN|CONT|PAUSE|NAME) |--- (PASS|FAIL|SKIP): |_test\.go:\d+: `)

// restart starts the silence watch and the guest deaths afresh, for a
// new box.
func (r *testResults) restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastOutput, r.lastLine = r.now(), ""
	r.running, r.inKnownIssue = "", false
	clear(r.deaths)
}

// silence says why the tests count as stalled at now, if they have
// printed nothing of their own for limit since their box began, or ""
// while they have.
func (r *testResults) silence(began, now time.Time, limit time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := now.Sub(r.lastOutput)
	if since := now.Sub(began); since < d {
		d = since
	}
	if d < limit {
		return ""
	}
	last := r.lastLine
	if last == "" {
		last = "(none in this box)"
	}
	return fmt.Sprintf("the box is alive but its tests have printed nothing for %d s (their last line: %s)", int(d.Round(time.Second)/time.Second), last)
}

package box

import (
	"regexp"
	"strings"
)

// A test can also fail because the guest it booted died of the box's
// known guest failures: a silent triple fault (the vCPU left in its reset
// state, no message) or a guest that never got as far as its agent. QEMU
// microvm's guests meet both in the box as well (BENCHMARKS.md, "The
// serial flood"), so by the project's rule they are the box's, as its
// kernel's crashes are. Many tests boot a guest again once when theirs
// dies so (logged as KNOWN ISSUE); for any test that failed with such a
// death as its own error, Main runs it once more in a fresh box, said on
// stderr, and its second run decides. A test that failed for any other
// reason in the same box, or that was already given its second run, is
// not run again: the binary's status stands.

// guestDied reports a line that tells of one of the box's known guest
// failures, as smol reports them.
func guestDied(line string) bool {
	return strings.Contains(line, "triple-faulted") && strings.Contains(line, "rip=0xfff0 ") ||
		strings.Contains(line, "the guest agent did not start within")
}

// testRunning matches testing's line for the test that runs (or runs
// again) from here on.
var testRunning = regexp.MustCompile(`=== (RUN|CONT|NAME) +(Test[^\s/]*)`)

// testLogEntry matches the first line of a test's log entry; the entry's
// further lines are indented below it.
var testLogEntry = regexp.MustCompile(`_test\.go:\d+: `)

// noteGuestDeath reads one line (mu held) for the guest deaths of the test
// that prints it. A death told inside a log entry that says KNOWN ISSUE
// is one the test handled itself (it booted another guest).
func (r *testResults) noteGuestDeath(line string) {
	if m := testRunning.FindStringSubmatch(line); m != nil {
		r.running, r.inKnownIssue = m[2], false
		return
	}
	if testLogEntry.MatchString(line) {
		r.inKnownIssue = strings.Contains(line, "KNOWN ISSUE")
	}
	if r.running != "" && !r.inKnownIssue && guestDied(line) {
		if _, seen := r.deaths[r.running]; !seen {
			r.deaths[r.running] = strings.TrimSpace(line)
		}
	}
}

// guestDeathReruns returns the failed tests, each with the line that told
// of its guest's death, when every test that failed in this box failed
// with one and none of them has had its second run yet; it marks them as
// having had it. Otherwise it returns nil.
func (r *testResults) guestDeathReruns() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failed) == 0 {
		return nil
	}
	again := map[string]string{}
	for name := range r.failed {
		line, died := r.deaths[name]
		if !died || r.rerunForDeath[name] {
			return nil
		}
		again[name] = line
	}
	for name := range again {
		r.rerunForDeath[name] = true
	}
	return again
}

package box

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// A box that fails under a test binary (its kernel crashed or hit its
// known BUG, or its watchdog found it hung) says nothing about the tests
// that were running, but the tests that had already passed did pass. So
// Main does not run the whole binary again in a fresh box: it runs what
// has not passed yet, by adding -test.skip for what has. A box crash then
// costs the test it interrupted, not the twenty minutes before it.

// testResults reads a test binary's verbose output (-test.v) as it passes
// through the box's console and records the top-level tests that ended,
// by name. Lines may carry a kernel message's start before the marker
// (the console interleaves them), so the marker is found anywhere.
type testResults struct {
	mu      sync.Mutex
	partial []byte
	passed  map[string]bool // PASS or SKIP
	failed  map[string]bool

	// Guest deaths (guestdeath.go): the test running now, whether the
	// log entry being printed says KNOWN ISSUE, each test's first line
	// telling of its guest's death in this box, and the tests already run
	// again for one.
	running       string
	inKnownIssue  bool
	deaths        map[string]string
	rerunForDeath map[string]bool

	// The tests' progress, for the silence watch (progress.go): when a
	// line of the tests' own output was last seen, and that line.
	lastOutput time.Time
	lastLine   string
	now        func() time.Time
}

// testEnded matches the line testing prints when a top-level test ends:
// "--- PASS: TestName (1.23s)". Subtests have a slash in their names.
var testEnded = regexp.MustCompile(`--- (PASS|SKIP|FAIL): (Test[^\s/]*) \(`)

func newTestResults() *testResults {
	return &testResults{passed: map[string]bool{}, failed: map[string]bool{}, deaths: map[string]string{}, rerunForDeath: map[string]bool{},
		lastOutput: time.Now(), now: time.Now}
}

func (r *testResults) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			if len(r.partial) < 4096 {
				r.partial = append(r.partial, b)
			}
			continue
		}
		if testOutput.Match(r.partial) {
			r.lastOutput, r.lastLine = r.now(), strings.TrimSpace(string(r.partial))
		}
		r.noteGuestDeath(string(r.partial))
		if m := testEnded.FindSubmatch(r.partial); m != nil {
			name := string(m[2])
			if string(m[1]) == "FAIL" {
				r.failed[name] = true
			} else {
				r.passed[name] = true
				delete(r.failed, name)
			}
		}
		r.partial = r.partial[:0]
	}
	return len(p), nil
}

// done returns the tests that passed or were skipped, sorted.
func (r *testResults) done() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.passed)
}

// failures returns the tests that failed and have not passed since, sorted.
func (r *testResults) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.failed)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// verboseArgs returns args with -test.v added where they do not ask for
// verbose output already (go test -v and go test -json both do), so that
// passing tests say so.
func verboseArgs(args []string) []string {
	for _, a := range args {
		if a == "-test.v" || strings.HasPrefix(a, "-test.v=") {
			return args
		}
	}
	return append(append([]string(nil), args...), "-test.v=true")
}

// rerunArgs returns the arguments that run args again without the tests in
// done, with -test.timeout lowered to what is left of the first run's
// (the whole series must end when go test expects the binary to). ok is
// false when there is no way to leave them out (the caller gave its own
// -test.skip, whose per-level slashes would not survive a merge): then
// everything runs again.
func rerunArgs(args []string, done []string, left time.Duration) (out []string, ok bool) {
	ok = true
	for _, a := range args {
		switch {
		case a == "-test.skip" || strings.HasPrefix(a, "-test.skip="):
			ok = false
			out = append(out, a)
		case strings.HasPrefix(a, "-test.timeout="):
			if left > 0 {
				a = "-test.timeout=" + left.Round(time.Second).String()
			}
			out = append(out, a)
		default:
			out = append(out, a)
		}
	}
	if ok && len(done) > 0 {
		quoted := make([]string, len(done))
		for i, name := range done {
			quoted[i] = regexp.QuoteMeta(name)
		}
		out = append(out, "-test.skip=^("+strings.Join(quoted, "|")+")$")
	}
	return out, ok
}

// testTimeout is the -test.timeout in args, or 0.
func testTimeout(args []string) time.Duration {
	for _, a := range args {
		if v, found := strings.CutPrefix(a, "-test.timeout="); found {
			if d, err := time.ParseDuration(v); err == nil {
				return d
			}
		}
	}
	return 0
}

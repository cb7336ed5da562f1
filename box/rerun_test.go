package box

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestTestResultsReadVerboseOutputThroughTheConsole(t *testing.T) {
	r := newTestResults()
	out := "=== RUN   TestBoot\n--- PASS: TestBoot (3.10s)\n" +
		"=== RUN   TestFork\n    --- PASS: TestFork/child (1.00s)\n" +
		"[  637.05] kvm: something--- FAIL: TestFork (9.00s)\n" + // a kernel line's start before the marker
		"--- SKIP: TestGPU3D (0.00s)\n" +
		"--- FAIL: TestVolume (2.00s)\n--- PASS: TestVolume (1.00s)\n" + // failed, then passed in a later box
		"--- PASS: TestUnfinished"
	for _, chunk := range strings.SplitAfter(out, "S") { // lines split across writes
		r.Write([]byte(chunk))
	}
	if got, want := r.done(), []string{"TestBoot", "TestGPU3D", "TestVolume"}; !reflect.DeepEqual(got, want) {
		t.Errorf("done = %q, want %q", got, want)
	}
	if got, want := r.failures(), []string{"TestFork"}; !reflect.DeepEqual(got, want) {
		t.Errorf("failures = %q, want %q (a subtest's PASS is not its parent's)", got, want)
	}
}

func TestRerunSkipsWhatPassedAndLowersTheTimeout(t *testing.T) {
	args := []string{"-test.run=^TestMachine", "-test.timeout=1h20m0s", "-test.v=true"}
	got, ok := rerunArgs(args, []string{"TestMachineA", "TestMachine.B"}, 47*time.Minute+400*time.Millisecond)
	want := []string{"-test.run=^TestMachine", "-test.timeout=47m0s", "-test.v=true", `-test.skip=^(TestMachineA|TestMachine\.B)$`}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("rerunArgs = %q, %v; want %q", got, ok, want)
	}
	skip := regexp.MustCompile(strings.TrimPrefix(got[3], "-test.skip="))
	for name, skipped := range map[string]bool{"TestMachineA": true, "TestMachine.B": true, "TestMachineAB": false, "TestMachineXB": false, "TestMachine": false} {
		if skip.MatchString(name) != skipped {
			t.Errorf("skip %s = %v, want %v", name, !skipped, skipped)
		}
	}
	if testTimeout(args) != 80*time.Minute {
		t.Errorf("testTimeout = %v", testTimeout(args))
	}

	// The caller's own -test.skip stays, and then everything runs again.
	own := []string{"-test.skip=TestX/sub"}
	if got, ok := rerunArgs(own, []string{"TestA"}, 0); ok || !reflect.DeepEqual(got, own) {
		t.Errorf("with -test.skip given: %q, %v; want the arguments unchanged and false", got, ok)
	}
}

func TestVerboseArgsKeepsTheCallersVerbosity(t *testing.T) {
	if got := verboseArgs([]string{"-test.timeout=1m0s"}); !reflect.DeepEqual(got, []string{"-test.timeout=1m0s", "-test.v=true"}) {
		t.Errorf("verboseArgs added %q", got)
	}
	for _, v := range []string{"-test.v=test2json", "-test.v=true", "-test.v"} {
		if got := verboseArgs([]string{v}); !reflect.DeepEqual(got, []string{v}) {
			t.Errorf("verboseArgs(%s) = %q", v, got)
		}
	}
}

func TestSilenceCountsOnlyTheTestsOwnLines(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := newTestResults()
	r.now = func() time.Time { return clock }
	r.restart()
	began := clock
	const limit = 10 * time.Minute
	at := func(d time.Duration) time.Time { return began.Add(d) }

	clock = at(time.Minute)
	r.Write([]byte("=== RUN   TestMachineLifecycle/cp_both_ways\n"))
	clock = at(3 * time.Minute)
	r.Write([]byte("    machine_test.go:88: copied 64 MiB in")) // a log line, cut across writes
	r.Write([]byte(" 3.2 s\n"))
	// The box kernel's messages and a test's stray output are not progress.
	clock = at(9 * time.Minute)
	r.Write([]byte("[  812.1] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:\nsome guest console line\n"))
	if s := r.silence(began, at(12*time.Minute), limit); s != "" {
		t.Errorf("after 9 min of silence: %q", s)
	}
	s := r.silence(began, at(13*time.Minute+400*time.Millisecond), limit)
	if !strings.Contains(s, "printed nothing for 600 s") || !strings.Contains(s, "machine_test.go:88: copied 64 MiB in 3.2 s") {
		t.Errorf("after 10 min of silence: %q", s)
	}

	// A new box starts the count afresh, from when it began: the wait for
	// another box and its boot are not the tests' silence.
	r.restart()
	later := at(40 * time.Minute)
	if s := r.silence(later, later.Add(9*time.Minute), limit); s != "" {
		t.Errorf("9 min into a new box: %q", s)
	}
	if s := r.silence(later, later.Add(11*time.Minute), limit); !strings.Contains(s, "printed nothing for 660 s (their last line: (none in this box))") {
		t.Errorf("11 min into a new box: %q", s)
	}
}

// TestGuestDeathsAreTheTestsOwn: a failed test whose own error tells of
// the box's known guest failures is run once more, and only once; a
// death the test logged as a KNOWN ISSUE (it booted another guest), a
// death in another test, or another failure beside it are not reasons.
func TestGuestDeathsAreTheTestsOwn(t *testing.T) {
	read := func(out string) *testResults {
		r := newTestResults()
		for _, chunk := range strings.SplitAfter(out, "e") { // lines split across writes
			r.Write([]byte(chunk))
		}
		return r
	}
	tripleFault := "smol: guest crashed: vCPU 0: guest triple-faulted (shutdown exit): rip=0xfff0 rsp=0x0 rflags=0x2"
	died := "=== RUN   TestBoot\n" +
		"    boot_test.go:12: exit 1, stderr:\n" +
		"        " + tripleFault + "\n" +
		"--- FAIL: TestBoot (3.10s)\n"
	r := read(died)
	again := r.guestDeathReruns()
	if len(again) != 1 || !strings.Contains(again["TestBoot"], "rip=0xfff0") {
		t.Fatalf("a test failed by its guest's triple fault: %q, want it run again", again)
	}
	if again := r.guestDeathReruns(); again != nil {
		t.Errorf("the same test is run again a second time: %q", again)
	}
	// In a later box the test dies the same way again: no third run.
	r.restart()
	for _, chunk := range strings.SplitAfter(died, "\n") {
		r.Write([]byte(chunk))
	}
	if again := r.guestDeathReruns(); again != nil {
		t.Errorf("a test that died in its second run is run a third time: %q", again)
	}

	hang := "=== RUN   TestMachine\n    machine_test.go:40: smol: the guest agent did not start within 2m0s\n--- FAIL: TestMachine (130.00s)\n"
	if again := read(hang).guestDeathReruns(); len(again) != 1 {
		t.Errorf("a guest that never reached its agent: %q, want its test run again", again)
	}

	for name, out := range map[string]string{
		"handled as a known issue, then failed otherwise": "=== RUN   TestFork\n" +
			"    fork_test.go:68: KNOWN ISSUE: the guest died (\n        " + tripleFault + "\n        ); attempt 2 of 3\n" +
			"    fork_test.go:90: the child's checksum differs\n--- FAIL: TestFork (9.00s)\n",
		"another test failed beside it": died + "=== RUN   TestVolume\n    volume_test.go:3: wrong bytes\n--- FAIL: TestVolume (1.00s)\n",
		"the death was another test's": "=== RUN   TestA\n    a_test.go:1: " + tripleFault + "\n--- PASS: TestA (1.00s)\n" +
			"=== RUN   TestB\n    b_test.go:2: wrong\n--- FAIL: TestB (1.00s)\n",
		"no failure": "=== RUN   TestA\n    a_test.go:1: " + tripleFault + "\n--- PASS: TestA (1.00s)\n",
	} {
		if again := read(out).guestDeathReruns(); again != nil {
			t.Errorf("%s: %q run again", name, again)
		}
	}
}

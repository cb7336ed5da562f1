package rounds

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestRunReplacesFailedRounds(t *testing.T) {
	var attempts []int
	res := Run(3, 2, func(attempt int) error {
		attempts = append(attempts, attempt)
		if attempt == 2 {
			return &GuestError{Who: "smol", Kind: Hung}
		}
		return nil
	}, t.Logf)
	if res.Done != 3 || len(res.Failures) != 1 || res.GaveUp {
		t.Fatalf("Run = %+v, want 3 done, 1 failure", res)
	}
	if fmt.Sprint(attempts) != "[1 2 3 4]" {
		t.Fatalf("attempts %v, want [1 2 3 4]", attempts)
	}
	if s := res.Summary(3); !strings.Contains(s, "1 smol hung") {
		t.Fatalf("Summary = %q", s)
	}
}

func TestRunGivesUp(t *testing.T) {
	calls := 0
	res := Run(5, 2, func(int) error {
		calls++
		if calls == 1 {
			return nil
		}
		return errors.New("dead")
	}, t.Logf)
	if res.Done != 1 || len(res.Failures) != 3 || !res.GaveUp || calls != 4 {
		t.Fatalf("Run = %+v after %d calls, want 1 done, 3 failures, gave up after 4", res, calls)
	}
	if s := res.Summary(5); !strings.Contains(s, "GAVE UP") {
		t.Fatalf("Summary = %q", s)
	}
}

func TestCommandHung(t *testing.T) {
	err := Command("sleeper", exec.Command("sh", "-c", "echo started; sleep 10"), 200*time.Millisecond, nil)
	var g *GuestError
	if !errors.As(err, &g) || g.Kind != Hung || !strings.Contains(g.Tail, "started") {
		t.Fatalf("Command = %v, want a hung GuestError with its output", err)
	}
}

func TestCommandDied(t *testing.T) {
	err := Command("crasher", exec.Command("sh", "-c", "echo 'guest triple-faulted' >&2; exit 1"), 10*time.Second, nil)
	var g *GuestError
	if !errors.As(err, &g) || g.Kind != Died || g.Exit == nil || !strings.Contains(g.Error(), "triple-faulted") {
		t.Fatalf("Command = %v, want a died GuestError with its output", err)
	}
	if err := Command("ok", exec.Command("true"), 10*time.Second, nil); err != nil {
		t.Fatalf("true: %v", err)
	}
}

func TestTailKeepsLastLines(t *testing.T) {
	var tail Tail
	for i := range 20 {
		fmt.Fprintf(&tail, "line %d\x1b[0m\r\n", i)
	}
	got := tail.String()
	if strings.Contains(got, "line 11") || !strings.HasPrefix(got, "line 12") || !strings.HasSuffix(got, "line 19[0m") {
		t.Fatalf("tail = %q", got)
	}
}

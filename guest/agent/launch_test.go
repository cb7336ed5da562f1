package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/smolvm/smol/agent"
)

// TestMain lets the test binary be the launcher, as the agent is.
func TestMain(m *testing.M) {
	if len(os.Args) > 0 && os.Args[0] == launcherName {
		runLauncher(os.Args[1:])
	}
	os.Exit(m.Run())
}

// statusOf runs cat /proc/self/status through the launcher as uid:uid
// with group 1234, caps and (if noNewPrivs) the no_new_privs bit, and
// returns its fields.
func statusOf(t *testing.T, uid uint32, caps agent.Capabilities, noNewPrivs bool) map[string]string {
	t.Helper()
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip(err)
	}
	cmd := &exec.Cmd{Path: cat, Args: []string{"cat", "/proc/self/status"},
		SysProcAttr: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{1234}}}}
	l, err := useLauncher(cmd, &caps, noNewPrivs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	err = cmd.Start()
	l.started()
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if !l.execed() {
		t.Errorf("the launcher reported a failure to exec %s", cat)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("launch: %v", err)
	}
	out := stdout.String()
	fields := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// TestLauncherSetsCredentials: the command runs with exactly the
// capability sets, user and groups it was given, root or not, on this
// host's kernel (the guest's is the same interface).
func TestLauncherSetsCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the launcher starts as root, as the guest agent does")
	}
	const chownRaw = "0000000000002001" // CAP_CHOWN, CAP_NET_RAW
	for _, c := range []struct {
		name string
		uid  uint32
		caps agent.Capabilities
		want map[string]string
	}{
		{"root with two capabilities", 0,
			agent.Capabilities{Bounding: []uint8{0, 13}, Effective: []uint8{0, 13}, Permitted: []uint8{0, 13}},
			map[string]string{"CapBnd": chownRaw, "CapEff": chownRaw, "CapPrm": chownRaw, "CapInh": "0000000000000000", "Uid": "0\t0\t0\t0", "Groups": "1234"}},
		{"root with none", 0, agent.Capabilities{},
			map[string]string{"CapBnd": "0000000000000000", "CapEff": "0000000000000000", "CapPrm": "0000000000000000"}},
		{"a user with an ambient capability", 1000,
			agent.Capabilities{Bounding: []uint8{10}, Effective: []uint8{10}, Permitted: []uint8{10}, Inheritable: []uint8{10}, Ambient: []uint8{10}},
			map[string]string{"CapBnd": "0000000000000400", "CapEff": "0000000000000400", "CapAmb": "0000000000000400", "Uid": "1000\t1000\t1000\t1000", "Gid": "1000\t1000\t1000\t1000", "Groups": "1234"}},
		{"a user without", 1000, agent.Capabilities{Bounding: []uint8{0, 13}},
			map[string]string{"CapBnd": chownRaw, "CapEff": "0000000000000000", "CapPrm": "0000000000000000"}},
	} {
		got := statusOf(t, c.uid, c.caps, false)
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s is %q, want %q", c.name, k, got[k], v)
			}
		}
	}
}

// TestLauncherSetsNoNewPrivs: the bit is set when asked, for root and
// for a user, and not otherwise.
func TestLauncherSetsNoNewPrivs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the launcher starts as root, as the guest agent does")
	}
	all := agent.Capabilities{Bounding: []uint8{0, 13}, Effective: []uint8{0, 13}, Permitted: []uint8{0, 13}}
	for _, c := range []struct {
		uid        uint32
		noNewPrivs bool
		want       string
	}{{0, true, "1"}, {1000, true, "1"}, {0, false, "0"}, {1000, false, "0"}} {
		if got := statusOf(t, c.uid, all, c.noNewPrivs)["NoNewPrivs"]; got != c.want {
			t.Errorf("uid %d, noNewPrivs %v: NoNewPrivs is %q, want %q", c.uid, c.noNewPrivs, got, c.want)
		}
	}
}

// TestLauncherFailsLikeAMissingCommand: a program that cannot be run
// ends the launcher with status 126 and one line on stderr, and the
// launcher reports that it did not exec. (Without root the launcher
// fails earlier, at the user switch: still one line, still no exec.)
func TestLauncherFailsLikeAMissingCommand(t *testing.T) {
	cmd := &exec.Cmd{Path: "/nonexistent/program", Args: []string{"program"},
		SysProcAttr: &syscall.SysProcAttr{Credential: &syscall.Credential{}}}
	l, err := useLauncher(cmd, &agent.Capabilities{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Start()
	l.started()
	if err != nil {
		t.Fatal(err)
	}
	if l.execed() {
		t.Error("the launcher of a missing program reported that it exec'd it")
	}
	err = cmd.Wait()
	want := "/nonexistent/program"
	if os.Geteuid() != 0 {
		want = "supplementary groups"
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 126 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("launching a missing program: %v, stderr %q", err, stderr.String())
	}
}

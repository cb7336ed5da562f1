package machine

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lingeringVMMEnv makes the test binary a stand-in VMM process: it serves
// the control API on the socket the variable names and, once asked to
// stop, exits a while after it answered, as a real VMM does while the
// kernel tears its VM down.
const lingeringVMMEnv = "SMOL_TEST_LINGERING_VMM"

func TestMain(m *testing.M) {
	if sock := os.Getenv(lingeringVMMEnv); sock != "" {
		os.Exit(serveLingeringVMM(sock))
	}
	os.Exit(m.Run())
}

type lingeringVMM struct{ fakeVMM }

func (l *lingeringVMM) Shutdown(time.Duration) error {
	go func() {
		time.Sleep(500 * time.Millisecond) // after the answer has gone out
		os.Exit(0)
	}()
	return nil
}

func serveLingeringVMM(sock string) int {
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	NewServer(&lingeringVMM{fakeVMM{state: Running}}).Serve(l)
	return 1
}

// Stop returns only once the VMM process has exited, not when it answers
// or lets go of its lock: `rm -f` promises no VMM outlives it (a VMM seen
// alive after rm -f failed TestMachineFork in CI).
func TestStopWaitsForTheVMMProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lingeringVMMEnv+"="+sock)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c := NewClient(sock)
	ctx := context.Background()
	for i := 0; ; i++ {
		if _, err := c.Status(ctx); err == nil {
			break
		} else if i == 200 {
			t.Fatalf("the stand-in VMM does not answer: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err := c.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet (this test is its parent and has not waited), so an
	// exited process reads as a zombie.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if f[0] != "Z" {
		t.Errorf("Stop returned while the VMM process was in state %s, not exited", f[0])
	}
	cmd.Wait()
}

// A VMM whose process is gone by the time it is asked to stop is no
// VMM: Stop says so as ErrNoVMM, which stop and rm take as stopped.
func TestStopOfAGoneVMM(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := NewClient(sock).Stop(context.Background(), time.Second); err == nil {
		t.Error("Stop of a socket nobody serves succeeded")
	}
}

// Package rerun is a test binary for box's TestMainRunsWhatHasNotPassed:
// under box.Main, TestFirst passes, TestCrash makes the box's kernel print
// its known BUG line the first time it runs and passes the second,
// TestGuestDies fails the first time as if its guest had died of the
// box's known triple fault and passes the second, and each test counts
// its runs in $RERUN_DIR.
package rerun

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smolvm/smol/box"
	"github.com/smolvm/smol/vmm"
)

func TestMain(m *testing.M) { os.Exit(box.Main(m, vmm.HostBootsLinux)) }

// count appends a line to $RERUN_DIR/name and returns how many it holds.
func count(t *testing.T, name string) int {
	path := filepath.Join(os.Getenv("RERUN_DIR"), name)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("run\n")
	f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(b) / len("run\n")
}

func TestFirst(t *testing.T) { count(t, "first") }

func TestCrash(t *testing.T) {
	if count(t, "crash") > 1 {
		return
	}
	if err := os.WriteFile("/dev/kmsg", []byte("<1>BUG: TASK stack guard page was hit at 0000000000000000 (a test)\n"), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Minute)
}

func TestGuestDies(t *testing.T) {
	if count(t, "guestdies") > 1 {
		return
	}
	t.Fatal("smol: guest crashed: vCPU 0: guest triple-faulted (shutdown exit): rip=0xfff0 rsp=0x0 rflags=0x2 (a test)")
}

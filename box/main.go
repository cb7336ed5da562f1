package box

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/smolvm/smol/vmm"
)

// InBox reports whether this process runs inside the box.
func InBox() bool { return os.Getenv("SMOL_IN_BOX") == "1" }

// Main is a TestMain for tests that boot Linux guests. Where this host's
// /dev/kvm can boot Linux, or inside the box, it runs the tests. Otherwise it
// runs this same test binary, with the same arguments, inside a box, and
// returns its exit status: `go test` then boots real guests on any host.
func Main(m *testing.M) int {
	if InBox() || vmm.HostBootsLinux() {
		return m.Run()
	}
	script := shellQuote(os.Args[0])
	for _, a := range os.Args[1:] {
		script += " " + shellQuote(a)
	}
	fmt.Fprintf(os.Stderr, "box: host /dev/kvm cannot boot Linux; running %s inside the test box\n", shortName(os.Args[0]))
	code, err := Run(context.Background(), "exec "+script, Options{})
	for run := 2; run <= boxRuns && boxFailed(err); run++ {
		// Known issues: the box's emulated SVM sometimes takes its own
		// kernel down, and a box sometimes hangs (its watchdog ends
		// it). Neither says anything about the tests: run them again.
		fmt.Fprintf(os.Stderr, "box: KNOWN ISSUE: %v\nbox: running the tests again (box run %d of %d)\n", err, run, boxRuns)
		code, err = Run(context.Background(), "exec "+script, Options{})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "box: %v\n", err)
		return 1
	}
	return code
}

// boxRuns is how many boxes Main boots, one after another, while the box's
// own kernel crashes or the box hangs under the tests.
const boxRuns = 3

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

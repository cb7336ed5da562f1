package box

import (
	"io"
	"testing"
	"time"
)

func TestConsoleSpotsTheKnownKernelBug(t *testing.T) {
	c := &consoleTail{w: io.Discard, life: newLife(time.Now())}
	c.Write([]byte("[    1.0] guest: BUG: soft lockup - CPU#0 stuck\nok\n"))
	if bug := c.kernelBug(); bug != "" {
		t.Fatalf("a guest's BUG line counted: %q", bug)
	}
	c.Write([]byte("[   10.405001] BUG: TASK stack guard page was hit at 000000003e866e41\n[   10.4] stack guard page: 0000 [#1] SMP\n"))
	if bug := c.kernelBug(); bug != "[   10.405001] BUG: TASK stack guard page was hit at 000000003e866e41" {
		t.Fatalf("kernelBug %q", bug)
	}
}

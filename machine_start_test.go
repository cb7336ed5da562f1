package smol

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smolvm/smol/machine"
)

// TestStartFailureShowsThisBootsConsole: a VMM process that ended before
// its machine ran is reported by its last line and the end of what this
// start's guest wrote, escaped, and never by an earlier boot's output.
func TestStartFailureShowsThisBootsConsole(t *testing.T) {
	st, err := machine.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &NamedMachine{store: st, spec: &machine.Spec{Name: "m"}}
	dir := filepath.Dir(st.Path("m", machine.ConsoleLog))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := st.Path("m", machine.VMMLog)
	os.WriteFile(logPath, []byte("smol: the VM ended before its agent started\n"), 0o600)
	os.WriteFile(st.Path("m", machine.ConsoleLog), []byte("an earlier boot's last words\n"), 0o600)
	before := st.ConsoleSize("m")

	err = m.startFailure(logPath, before)
	if got := err.Error(); got != "machine m did not start: the VM ended before its agent started" {
		t.Errorf("without new console output: %q", got)
	}

	f, _ := os.OpenFile(st.Path("m", machine.ConsoleLog), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("Kernel panic - not syncing: \x1b[2Jattempted to kill init\n")
	f.Close()
	got := m.startFailure(logPath, before).Error()
	if !strings.HasPrefix(got, "machine m did not start: the VM ended before its agent started; guest console ends with:\n") ||
		!strings.Contains(got, "Kernel panic - not syncing") {
		t.Errorf("with this boot's panic: %q", got)
	}
	if strings.Contains(got, "earlier boot") {
		t.Errorf("an earlier boot's output is reported: %q", got)
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("the guest's escape sequence reaches the terminal: %q", got)
	}
}

// TestStartFailureNamesAVMMCrash: a VMM process that died of a runtime
// fault is reported by the fault, not by the last register of its dump.
func TestStartFailureNamesAVMMCrash(t *testing.T) {
	st, err := machine.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	logPath := st.Path("m", machine.VMMLog)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		t.Fatal(err)
	}
	report := "fatal error: unexpected signal during runtime execution\n[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x0]\n\ngoroutine 1 [running]:\nmain.main()\nrax 0x0\nfs 0x0\ngs 0x0\n"
	os.WriteFile(logPath, []byte(report), 0o600)
	got := vmmFailure(logPath)
	if !strings.Contains(got, "crashed: fatal error: unexpected signal during runtime execution") || !strings.Contains(got, logPath) {
		t.Errorf("vmmFailure = %q, want the fault and where the report is", got)
	}
}

package vmm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol/devices/power"
	"github.com/smolvm/smol/internal/syncbuf"
	"github.com/smolvm/smol/internal/testkernel"
)

// runTiny boots a hand-assembled "kernel" on this host's /dev/kvm. Tiny
// guests run even on PVM hosts, so these tests exercise the whole machine —
// loader, vCPU loop, port dispatch, UART, power device, stop path — anywhere.
func runTiny(t *testing.T, code []byte, cpus int) (StopReason, string, error) {
	t.Helper()
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Setenv("SMOL_ALLOW_PVM", "1")
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, code), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	m, err := New(Config{Kernel: kernel, Cmdline: "console=ttyS0", CPUs: cpus, Memory: 64 << 20, Console: out})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(30*time.Second, m.Stop)
	defer watchdog.Stop()
	reason, err := m.Wait()
	return reason, out.String(), err
}

func TestTinyGuestPrintsAndPowersOff(t *testing.T) {
	code := append(testkernel.Print("hello from ring 0\n"), testkernel.PowerOff(power.SleepControlPort)...)
	reason, out, err := runTiny(t, code, 2)
	if err != nil || reason != StopPoweroff {
		t.Fatalf("stopped with %v, %v; want poweroff", reason, err)
	}
	if out != "hello from ring 0\n" {
		t.Fatalf("console = %q", out)
	}
}

func TestTripleFaultIsACrashWithRegisters(t *testing.T) {
	reason, _, err := runTiny(t, testkernel.Garbage, 1)
	var crash *CrashError
	if reason != StopCrash || !errors.As(err, &crash) {
		t.Fatalf("stopped with %v, %v; want a crash", reason, err)
	}
	if !crash.HasReg || !strings.Contains(err.Error(), "rip=") {
		t.Fatalf("crash without registers: %v", err)
	}
	t.Logf("reported: %v", err)
}

func TestStopEndsASpinningGuest(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Setenv("SMOL_ALLOW_PVM", "1")
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, []byte{0xeb, 0xfe}), 0o644) // jmp .
	m, err := New(Config{Kernel: kernel, CPUs: 2, Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Start()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	m.Stop()
	reason, err := m.Wait()
	if reason != StopRequested || err != nil {
		t.Fatalf("stopped with %v, %v", reason, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop took %v", d)
	}
}

// TestStopBeforeStart: a machine stopped before it ever ran ends at once;
// Wait does not wait for vCPUs that never started.
func TestStopBeforeStart(t *testing.T) {
	m := tinyMachine(t, []byte{0xf4})
	m.Stop()
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done never closed")
	}
	if reason, err := m.Wait(); reason != StopRequested || err != nil {
		t.Errorf("Wait: %v, %v", reason, err)
	}
	if err := m.Start(); err == nil {
		t.Error("a stopped machine started")
	}
}

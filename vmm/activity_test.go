package vmm

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/smolvm/smol/internal/testkernel"
)

// TestGuestActivityTellsALiveGuest: a guest that keeps exiting shows its
// exits in the window, and each virtio device's interrupt state is named;
// once the machine is closed there is nothing to describe.
func TestGuestActivityTellsALiveGuest(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Setenv("SMOL_ALLOW_PVM", "1")
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinux")
	// mov dx, 0x3f; 1: in al, dx; jmp 1b: a port read the VMM answers,
	// over and over.
	code := []byte{0x66, 0xba, 0x3f, 0x00, 0xec, 0xeb, 0xfd}
	if err := os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, code), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Kernel: kernel, CPUs: 1, Memory: 64 << 20,
		Devices: Devices{Vsock: &Vsock{Path: filepath.Join(dir, "v.sock")}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		m.Close()
		t.Fatal(err)
	}
	got := m.GuestActivity(200 * time.Millisecond)
	t.Logf("%s", got)
	// The thread may be in the guest or handling an exit at the moment
	// of the look; either way it entered KVM_RUN, and KVM saw exits.
	exits := regexp.MustCompile(`vcpu0 \(in (KVM_RUN|the VMM), entries \+(\d+)\) exits \+(\d+)`).FindStringSubmatch(got)
	if exits == nil {
		t.Fatalf("no entry and exit counts for vcpu0 in %q", got)
	}
	if entries, _ := strconv.Atoi(exits[2]); entries == 0 {
		t.Errorf("a guest reading a port in a loop never re-entered KVM_RUN: %q", got)
	}
	if n, _ := strconv.Atoi(exits[3]); n == 0 {
		t.Errorf("a guest reading a port in a loop made no exits: %q", got)
	}
	// The guest never programmed the I/O APIC: the vsock pin is as reset
	// left it, masked, and no interrupt is pending.
	if !regexp.MustCompile(`; vsock isr 0x0 pin \d+ vector 0x0 edge masked$`).MatchString(got) {
		t.Errorf("vsock interrupt state missing or wrong in %q", got)
	}
	m.Stop()
	m.Wait()
	m.Close()
	if got := m.GuestActivity(time.Millisecond); got != "" {
		t.Errorf("after Close: %q", got)
	}
}

package vmm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckHostExplainsMissingKVM(t *testing.T) {
	saved := kvmDevice
	defer func() { kvmDevice = saved }()
	kvmDevice = filepath.Join(t.TempDir(), "kvm")
	err := CheckHost()
	if !errors.Is(err, ErrNoKVM) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing device: %v", err)
	}
}

func TestCheckHostRecognisesPVM(t *testing.T) {
	if !pvmLoaded() {
		t.Skip("this host's KVM is not PVM")
	}
	if _, err := os.Stat(kvmDevice); err != nil {
		// PVM built in without a KVM device (some of this project's
		// machines): CheckHost says so, and points at the box too.
		if err := CheckHost(); !errors.Is(err, ErrNoKVM) || !strings.Contains(err.Error(), "make box") {
			t.Fatalf("PVM without /dev/kvm: %v, want ErrNoKVM pointing at the box", err)
		}
		return
	}
	t.Setenv("SMOL_ALLOW_PVM", "")
	if err := CheckHost(); !errors.Is(err, ErrPVMHost) || !strings.Contains(err.Error(), "make box") {
		t.Fatalf("PVM host: %v, want ErrPVMHost pointing at the box", err)
	}
}

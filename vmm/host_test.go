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
	if _, err := os.Stat(pvmModule); err != nil {
		t.Skip("this host's KVM is not PVM")
	}
	t.Setenv("SMOL_ALLOW_PVM", "")
	if err := CheckHost(); !errors.Is(err, ErrPVMHost) || !strings.Contains(err.Error(), "make box") {
		t.Fatalf("PVM host: %v, want ErrPVMHost pointing at the box", err)
	}
}

package kvm

import (
	"os"
	"testing"

	"github.com/smolvm/smol/box"
)

// TestMain runs this package's tests where there is a /dev/kvm: here, or,
// on a host without one (some of this project's machines have PVM built
// in but no KVM device), inside the test box, whose KVM is real. Their
// guests are a few hand-assembled instructions, so any KVM runs them.
func TestMain(m *testing.M) { os.Exit(box.Main(m, hasDevice)) }

func hasDevice() bool {
	_, err := os.Stat(DevicePath)
	return err == nil
}

package vmm

import (
	"os"
	"testing"

	"github.com/smolvm/smol/box"
	"github.com/smolvm/smol/kvm"
)

// TestMain runs this package's tests where there is a /dev/kvm: here, or,
// on a host without one (some of this project's machines have PVM built
// in but no KVM device), inside the test box, whose KVM is real. Their
// guests are tiny hand-made programs, so any KVM runs them.
func TestMain(m *testing.M) { os.Exit(box.Main(m, hasKVMDevice)) }

func hasKVMDevice() bool {
	_, err := os.Stat(kvm.DevicePath)
	return err == nil
}

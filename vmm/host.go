package vmm

import (
	"errors"
	"fmt"
	"os"
)

// ErrNoKVM reports that /dev/kvm is missing or not usable by this user.
var ErrNoKVM = errors.New("no usable /dev/kvm")

// ErrPVMHost reports a /dev/kvm that is KVM's PVM flavour (kvm_pvm): a
// software, shadow-paging KVM without VMX/SVM that emulates ring-0 guest code
// and cannot boot a stock Linux kernel. Detected up front, because the
// alternative is a guest that never gets anywhere.
var ErrPVMHost = errors.New("this /dev/kvm is PVM (kvm_pvm), which cannot boot a stock Linux kernel; run smol inside the test box with real KVM: make box RUN='bin/smol run ...'")

// pvmModule is present when the PVM flavour of KVM is loaded.
const pvmModule = "/sys/module/kvm_pvm"

// kvmDevice is the KVM device node (a variable so tests can point it elsewhere).
var kvmDevice = "/dev/kvm"

// CheckHost reports whether this host's /dev/kvm can boot a Linux guest.
// SMOL_ALLOW_PVM=1 skips the PVM check, for tiny test guests that PVM runs.
func CheckHost() error {
	f, err := os.OpenFile(kvmDevice, os.O_RDWR, 0)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist) && pvmLoaded():
			// Seen on this project's machines: the kernel has PVM built
			// in but registered no KVM device, so nothing here boots a
			// guest; the box (QEMU's software CPU) needs no /dev/kvm.
			return fmt.Errorf("%w: /dev/kvm does not exist (this kernel has PVM but no KVM device); run smol inside the test box with real KVM: make box RUN='bin/smol run ...'", ErrNoKVM)
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%w: /dev/kvm does not exist (is the kvm module loaded and virtualization enabled?)", ErrNoKVM)
		case errors.Is(err, os.ErrPermission):
			return fmt.Errorf("%w: permission denied on /dev/kvm (add yourself to the kvm group)", ErrNoKVM)
		}
		return fmt.Errorf("%w: %v", ErrNoKVM, err)
	}
	f.Close()
	if os.Getenv("SMOL_ALLOW_PVM") == "" && pvmLoaded() {
		return ErrPVMHost
	}
	return nil
}

// pvmLoaded reports whether this kernel has the PVM flavour of KVM.
func pvmLoaded() bool {
	_, err := os.Stat(pvmModule)
	return err == nil
}

// HostBootsLinux reports whether guests can be booted directly on this host.
func HostBootsLinux() bool { return CheckHost() == nil }

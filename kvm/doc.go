// Package kvm is a thin, typed layer over the Linux KVM ioctl API for
// x86_64: the /dev/kvm system fd (System), a virtual machine (VM) and its
// vCPUs (VCPU), with Go structs laid out exactly like the kernel's.
//
// It is mechanism only. It does not decide memory layouts, CPUID policy,
// boot state or how exits are handled; the vmm packages do. Each method is
// one ioctl (occasionally a retry loop around one, where the kernel asks for
// a bigger buffer), and every error names the ioctl that failed and wraps
// the errno, so errors.Is(err, unix.EINVAL) works.
//
// Why not an existing Go KVM library: the VMM needs every state get/set pair
// for snapshots, bounds-checked views into the shared kvm_run page (its
// offsets come from the kernel, but a VMM should not trust any pointer it
// did not compute), and no cgo.
//
// Data from the guest reaches the VMM through the kvm_run page; the exit
// accessors (VCPU.IO, VCPU.MMIO, ...) return slices into that page that
// are valid until the next VCPU.Run, after bounds-checking the kernel's
// offsets and lengths against the mapping.
package kvm

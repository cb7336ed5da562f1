package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux ioctl request numbers pack a direction, the size of the argument
// struct, a type byte and a number (<asm-generic/ioctl.h>). They are computed
// here from the same inputs the kernel header uses, so a wrong struct size
// shows up as a wrong request number (and ENOTTY) rather than as memory
// corruption; types_test.go pins the results to the kernel's values.
const (
	iocNRBits   = 8
	iocTypeBits = 8
	iocSizeBits = 14

	iocNRShift   = 0
	iocTypeShift = iocNRShift + iocNRBits
	iocSizeShift = iocTypeShift + iocTypeBits
	iocDirShift  = iocSizeShift + iocSizeBits

	iocNone  = 0
	iocWrite = 1 // userspace writes, the kernel reads
	iocRead  = 2 // the kernel writes, userspace reads
)

// kvmIO is KVMIO, the ioctl type byte of every KVM request.
const kvmIO = 0xAE

func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<iocDirShift | typ<<iocTypeShift | nr<<iocNRShift | size<<iocSizeShift
}

// ioNone, ioR, ioW and ioRW are the kernel's _IO, _IOR, _IOW and _IOWR
// for type KVMIO; "R" means the kernel writes the argument for userspace
// to read.
func ioNone(nr uintptr) uintptr     { return ioc(iocNone, kvmIO, nr, 0) }
func ioR(nr, size uintptr) uintptr  { return ioc(iocRead, kvmIO, nr, size) }
func ioW(nr, size uintptr) uintptr  { return ioc(iocWrite, kvmIO, nr, size) }
func ioRW(nr, size uintptr) uintptr { return ioc(iocRead|iocWrite, kvmIO, nr, size) }

// Request numbers, named as in <linux/kvm.h>.
var (
	// System ioctls (on the /dev/kvm fd).
	kvmGetAPIVersion          = ioNone(0x00)
	kvmCreateVM               = ioNone(0x01)
	kvmGetMSRIndexList        = ioRW(0x02, unsafe.Sizeof(msrListHeader{}))
	kvmCheckExtension         = ioNone(0x03)
	kvmGetVCPUMmapSize        = ioNone(0x04)
	kvmGetSupportedCPUID      = ioRW(0x05, unsafe.Sizeof(cpuidHeader{}))
	kvmGetEmulatedCPUID       = ioRW(0x09, unsafe.Sizeof(cpuidHeader{}))
	kvmGetMSRFeatureIndexList = ioRW(0x0a, unsafe.Sizeof(msrListHeader{}))

	// VM ioctls.
	kvmCreateVCPU          = ioNone(0x41)
	kvmGetDirtyLog         = ioW(0x42, unsafe.Sizeof(dirtyLog{}))
	kvmSetUserMemoryRegion = ioW(0x46, unsafe.Sizeof(UserMemoryRegion{}))
	kvmSetTSSAddr          = ioNone(0x47)
	kvmSetIdentityMapAddr  = ioW(0x48, unsafe.Sizeof(uint64(0)))
	kvmCreateIRQChip       = ioNone(0x60)
	kvmIRQLine             = ioW(0x61, unsafe.Sizeof(irqLevel{}))
	kvmSetGSIRouting       = ioW(0x6a, 8) // struct kvm_irq_routing: its 8-byte header; the entries follow
	kvmGetIRQChip          = ioRW(0x62, unsafe.Sizeof(IRQChip{}))
	kvmSetIRQChip          = ioR(0x63, unsafe.Sizeof(IRQChip{})) // _IOR in the kernel header, sic
	kvmIRQFD               = ioW(0x76, unsafe.Sizeof(irqFD{}))
	kvmCreatePIT2          = ioW(0x77, unsafe.Sizeof(PITConfig{}))
	kvmIOEventFD           = ioW(0x79, unsafe.Sizeof(IOEventFD{}))
	kvmSetClock            = ioW(0x7b, unsafe.Sizeof(ClockData{}))
	kvmGetClock            = ioR(0x7c, unsafe.Sizeof(ClockData{}))
	kvmGetPIT2             = ioR(0x9f, unsafe.Sizeof(PITState2{}))
	kvmSetPIT2             = ioW(0xa0, unsafe.Sizeof(PITState2{}))
	kvmEnableCap           = ioW(0xa3, unsafe.Sizeof(enableCap{})) // VM and vCPU

	// vCPU ioctls.
	kvmRun           = ioNone(0x80)
	kvmGetRegs       = ioR(0x81, unsafe.Sizeof(Regs{}))
	kvmSetRegs       = ioW(0x82, unsafe.Sizeof(Regs{}))
	kvmGetSregs      = ioR(0x83, unsafe.Sizeof(Sregs{}))
	kvmSetSregs      = ioW(0x84, unsafe.Sizeof(Sregs{}))
	kvmGetMSRs       = ioRW(0x88, unsafe.Sizeof(msrsHeader{}))
	kvmSetMSRs       = ioW(0x89, unsafe.Sizeof(msrsHeader{}))
	kvmGetFPU        = ioR(0x8c, unsafe.Sizeof(FPU{}))
	kvmSetFPU        = ioW(0x8d, unsafe.Sizeof(FPU{}))
	kvmGetLAPIC      = ioR(0x8e, unsafe.Sizeof(LAPICState{}))
	kvmSetLAPIC      = ioW(0x8f, unsafe.Sizeof(LAPICState{}))
	kvmSetCPUID2     = ioW(0x90, unsafe.Sizeof(cpuidHeader{}))
	kvmGetCPUID2     = ioRW(0x91, unsafe.Sizeof(cpuidHeader{}))
	kvmGetMPState    = ioR(0x98, unsafe.Sizeof(MPState(0)))
	kvmSetMPState    = ioW(0x99, unsafe.Sizeof(MPState(0)))
	kvmNMI           = ioNone(0x9a)
	kvmGetVCPUEvents = ioR(0x9f, unsafe.Sizeof(VCPUEvents{}))
	kvmSetVCPUEvents = ioW(0xa0, unsafe.Sizeof(VCPUEvents{}))
	kvmGetDebugRegs  = ioR(0xa1, unsafe.Sizeof(DebugRegs{}))
	kvmSetDebugRegs  = ioW(0xa2, unsafe.Sizeof(DebugRegs{}))
	kvmSetTSCKHz     = ioNone(0xa2)
	kvmGetTSCKHz     = ioNone(0xa3)
	kvmGetXSave      = ioR(0xa4, unsafe.Sizeof(XSave{}))
	kvmSetXSave      = ioW(0xa5, unsafe.Sizeof(XSave{}))
	kvmGetXCRs       = ioR(0xa6, unsafe.Sizeof(XCRs{}))
	kvmSetXCRs       = ioW(0xa7, unsafe.Sizeof(XCRs{}))
	kvmKVMClockCtrl  = ioNone(0xad)
	kvmGetXSave2     = ioR(0xcf, unsafe.Sizeof(XSave{}))
)

// ioctl issues request on fd with arg (a pointer or an immediate value) and
// returns the kernel's non-negative result. A failure is returned as
// "NAME: errno", with the unix.Errno wrapped so errors.Is works.
//
// An ioctl that fails with EINTR is made again: a signal was pending (Go
// preempts goroutines with SIGURG at any time), and KVM_CREATE_VM, for
// one, gives up on a pending signal while it registers with the memory
// manager, with nothing done. KVM_RUN, whose EINTR means something, does
// not come through here (VCPU.Run).
func ioctl(fd int, name string, req, arg uintptr) (int, error) {
	for {
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return int(r), fmt.Errorf("%s: %w", name, errno)
		}
		return int(r), nil
	}
}

// ioctlPtr is ioctl with a pointer argument. Keeping the unsafe.Pointer to
// uintptr conversion inside the Syscall expression is what tells the
// compiler to keep the pointee alive and in place for the call.
// Like ioctl, it retries EINTR.
func ioctlPtr(fd int, name string, req uintptr, arg unsafe.Pointer) (int, error) {
	for {
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return int(r), fmt.Errorf("%s: %w", name, errno)
		}
		return int(r), nil
	}
}

package vmm

import (
	"encoding/binary"
	"unsafe"

	"github.com/smolvm/smol/kvm"
)

// Local APIC register offsets and delivery modes (Intel SDM vol. 3, 10.5.1).
const (
	apicLVTLINT0     = 0x350
	apicLVTLINT1     = 0x360
	apicDeliveryMask = 0x700
	apicModeExtINT   = 0x700
	apicModeNMI      = 0x400
)

// wireLocalAPIC connects LINT0 to the PIC (ExtINT) and LINT1 to NMI, the
// wiring a PC's firmware leaves behind and Linux expects for virtual-wire
// mode and NMIs.
func wireLocalAPIC(fd *kvm.VCPU) error {
	lapic, err := fd.LAPIC()
	if err != nil {
		return err
	}
	set := func(off int, mode uint32) {
		v := binary.LittleEndian.Uint32(lapic.Regs[off:])
		binary.LittleEndian.PutUint32(lapic.Regs[off:], v&^apicDeliveryMask|mode)
	}
	set(apicLVTLINT0, apicModeExtINT)
	set(apicLVTLINT1, apicModeNMI)
	return fd.SetLAPIC(lapic)
}

// initialFPU is the x87/SSE state after FNINIT with SSE exceptions masked,
// what a kernel entered without firmware expects.
func initialFPU() kvm.FPU {
	var f kvm.FPU
	f.FCW = 0x37f
	f.MXCSR = 0x1f80
	return f
}

// hostAddr returns the host virtual address of b's first byte, for KVM.
func hostAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

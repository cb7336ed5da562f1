package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VM is one KVM virtual machine: its memory slots, in-kernel interrupt
// controllers and timers, and the factory for its vCPUs.
type VM struct {
	fd           int
	vcpuMmapSize int // from KVM_GET_VCPU_MMAP_SIZE, so the VM outlives /dev/kvm
}

// Fd returns the VM file descriptor.
func (vm *VM) Fd() int { return vm.fd }

// Close closes the VM fd. The kernel frees the VM once its vCPUs are
// closed too.
func (vm *VM) Close() error {
	if vm.fd < 0 {
		return nil
	}
	err := unix.Close(vm.fd)
	vm.fd = -1
	if err != nil {
		return fmt.Errorf("close VM: %w", err)
	}
	return nil
}

// CheckExtension asks about cap for this VM, whose answer can differ from
// the system-wide one (KVM_CAP_CHECK_EXTENSION_VM).
func (vm *VM) CheckExtension(c Cap) (int, error) {
	return ioctl(vm.fd, "KVM_CHECK_EXTENSION", kvmCheckExtension, uintptr(c))
}

// EnableCap turns on cap for the whole VM with up to four arguments.
func (vm *VM) EnableCap(c Cap, args ...uint64) error {
	return enableCapOn(vm.fd, c, args)
}

func enableCapOn(fd int, c Cap, args []uint64) error {
	ec := enableCap{Cap: uint32(c)}
	if len(args) > len(ec.Args) {
		return fmt.Errorf("KVM_ENABLE_CAP %d: %d arguments, at most %d", c, len(args), len(ec.Args))
	}
	copy(ec.Args[:], args)
	_, err := ioctlPtr(fd, "KVM_ENABLE_CAP", kvmEnableCap, unsafe.Pointer(&ec))
	return err
}

// SetUserMemoryRegion creates, moves, resizes or (MemorySize 0) deletes a
// memory slot. The memory at UserspaceAddr must stay mapped for as long as
// the slot exists.
func (vm *VM) SetUserMemoryRegion(r UserMemoryRegion) error {
	_, err := ioctlPtr(vm.fd, "KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion, unsafe.Pointer(&r))
	return err
}

// SetTSSAddr gives KVM three pages of guest physical address space (which
// must not hold RAM or devices) for the TSS that Intel VMX needs to emulate
// real mode. It must be called before the first vCPU runs.
func (vm *VM) SetTSSAddr(addr uint64) error {
	_, err := ioctl(vm.fd, "KVM_SET_TSS_ADDR", kvmSetTSSAddr, uintptr(addr))
	return err
}

// SetIdentityMapAddr gives KVM one page of guest physical address space for
// the identity page table VMX uses for real mode without unrestricted guest.
func (vm *VM) SetIdentityMapAddr(addr uint64) error {
	_, err := ioctlPtr(vm.fd, "KVM_SET_IDENTITY_MAP_ADDR", kvmSetIdentityMapAddr, unsafe.Pointer(&addr))
	return err
}

// CreateIRQChip creates the in-kernel PIC pair, IOAPIC and per-vCPU local
// APICs. It must precede CreateVCPU.
func (vm *VM) CreateIRQChip() error {
	_, err := ioctl(vm.fd, "KVM_CREATE_IRQCHIP", kvmCreateIRQChip, 0)
	return err
}

// CreatePIT2 creates the in-kernel 8254 timer (after CreateIRQChip).
func (vm *VM) CreatePIT2(cfg PITConfig) error {
	_, err := ioctlPtr(vm.fd, "KVM_CREATE_PIT2", kvmCreatePIT2, unsafe.Pointer(&cfg))
	return err
}

// IRQLine raises (level true) or lowers an interrupt line of the in-kernel
// irqchip. For an edge-triggered line, raise then lower.
func (vm *VM) IRQLine(irq uint32, level bool) error {
	l := irqLevel{IRQ: irq}
	if level {
		l.Level = 1
	}
	_, err := ioctlPtr(vm.fd, "KVM_IRQ_LINE", kvmIRQLine, unsafe.Pointer(&l))
	return err
}

// IRQFD makes a write to eventfd inject GSI gsi, without a trip through the
// VMM; device backends on other threads use it to interrupt the guest.
func (vm *VM) IRQFD(eventfd int, gsi uint32) error {
	if eventfd < 0 {
		return fmt.Errorf("KVM_IRQFD: bad eventfd %d", eventfd)
	}
	f := irqFD{FD: uint32(eventfd), GSI: gsi}
	_, err := ioctlPtr(vm.fd, "KVM_IRQFD", kvmIRQFD, unsafe.Pointer(&f))
	return err
}

// DeassignIRQFD undoes IRQFD(eventfd, gsi).
func (vm *VM) DeassignIRQFD(eventfd int, gsi uint32) error {
	if eventfd < 0 {
		return fmt.Errorf("KVM_IRQFD: bad eventfd %d", eventfd)
	}
	f := irqFD{FD: uint32(eventfd), GSI: gsi, Flags: irqFDDeassign}
	_, err := ioctlPtr(vm.fd, "KVM_IRQFD", kvmIRQFD, unsafe.Pointer(&f))
	return err
}

// IOEventFD registers (or, with IOEventFDDeassign, removes) an eventfd that
// KVM signals on a guest write instead of exiting; virtio queue notifies use
// it so a doorbell costs no VMM round trip.
func (vm *VM) IOEventFD(e IOEventFD) error {
	_, err := ioctlPtr(vm.fd, "KVM_IOEVENTFD", kvmIOEventFD, unsafe.Pointer(&e))
	return err
}

// GetClock returns the VM's kvmclock (guest nanoseconds).
func (vm *VM) GetClock() (ClockData, error) {
	var c ClockData
	_, err := ioctlPtr(vm.fd, "KVM_GET_CLOCK", kvmGetClock, unsafe.Pointer(&c))
	return c, err
}

// SetClock sets the VM's kvmclock, so a restored guest's time continues
// from where it was saved. KVM only honours Clock (and Realtime with
// ClockRealtime); other fields must be zero.
func (vm *VM) SetClock(c ClockData) error {
	_, err := ioctlPtr(vm.fd, "KVM_SET_CLOCK", kvmSetClock, unsafe.Pointer(&c))
	return err
}

// GetDirtyLog fills bitmap with one bit per page of the slot (bit i of
// word i/64 for page i), set for pages written since the previous call, and
// resets the log. The slot needs MemLogDirtyPages. bitmap must cover the
// slot: at least ceil(pages/64) words.
func (vm *VM) GetDirtyLog(slot uint32, bitmap []uint64) error {
	if len(bitmap) == 0 {
		return fmt.Errorf("KVM_GET_DIRTY_LOG slot %d: empty bitmap", slot)
	}
	d := dirtyLog{Slot: slot, Bitmap: &bitmap[0]}
	_, err := ioctlPtr(vm.fd, "KVM_GET_DIRTY_LOG", kvmGetDirtyLog, unsafe.Pointer(&d))
	return err
}

// GetIRQChip returns the state of one in-kernel interrupt controller.
func (vm *VM) GetIRQChip(id IRQChipID) (IRQChip, error) {
	c := IRQChip{ChipID: id}
	_, err := ioctlPtr(vm.fd, "KVM_GET_IRQCHIP", kvmGetIRQChip, unsafe.Pointer(&c))
	return c, err
}

// SetIRQChip restores the controller named by c.ChipID.
func (vm *VM) SetIRQChip(c IRQChip) error {
	_, err := ioctlPtr(vm.fd, "KVM_SET_IRQCHIP", kvmSetIRQChip, unsafe.Pointer(&c))
	return err
}

// GetPIT2 returns the in-kernel PIT's state.
func (vm *VM) GetPIT2() (PITState2, error) {
	var s PITState2
	_, err := ioctlPtr(vm.fd, "KVM_GET_PIT2", kvmGetPIT2, unsafe.Pointer(&s))
	return s, err
}

// SetPIT2 restores the in-kernel PIT's state.
func (vm *VM) SetPIT2(s PITState2) error {
	_, err := ioctlPtr(vm.fd, "KVM_SET_PIT2", kvmSetPIT2, unsafe.Pointer(&s))
	return err
}

// CreateVCPU creates vCPU id (its initial APIC ID) and maps its kvm_run
// page.
func (vm *VM) CreateVCPU(id int) (*VCPU, error) {
	if id < 0 {
		return nil, fmt.Errorf("KVM_CREATE_VCPU: negative id %d", id)
	}
	fd, err := ioctl(vm.fd, "KVM_CREATE_VCPU", kvmCreateVCPU, uintptr(id))
	if err != nil {
		return nil, fmt.Errorf("vCPU %d: %w", id, err)
	}
	unix.CloseOnExec(fd)
	run, err := unix.Mmap(fd, 0, vm.vcpuMmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vCPU %d: mmap kvm_run (%d bytes): %w", id, vm.vcpuMmapSize, err)
	}
	return &VCPU{id: id, fd: fd, run: run}, nil
}

// SetGSIRouting replaces the VM's whole GSI routing table. With a split
// irqchip the table starts empty and the VMM's I/O APIC model fills it: each
// GSI an irqfd raises becomes the MSI its redirection entry describes, which
// KVM delivers to the local APICs without leaving the kernel.
func (vm *VM) SetGSIRouting(routes []MSIRoute) error {
	if len(routes) > maxGSIRoutes {
		return fmt.Errorf("KVM_SET_GSI_ROUTING: %d routes, at most %d", len(routes), maxGSIRoutes)
	}
	// struct kvm_irq_routing is a header followed by its entries; build it
	// in one []uint64 so it is 8-byte aligned like the kernel's struct.
	const header, entry = 8, int(unsafe.Sizeof(irqRoutingEntry{}))
	buf := make([]uint64, (header+len(routes)*entry+7)/8)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	*(*uint32)(unsafe.Pointer(&raw[0])) = uint32(len(routes))
	for i, r := range routes {
		e := (*irqRoutingEntry)(unsafe.Pointer(&raw[header+i*entry]))
		*e = irqRoutingEntry{GSI: r.GSI, Type: irqRoutingMSI, AddressLo: r.AddressLo, AddressHi: r.AddressHi, Data: r.Data}
	}
	_, err := ioctlPtr(vm.fd, "KVM_SET_GSI_ROUTING", kvmSetGSIRouting, unsafe.Pointer(&buf[0]))
	return err
}

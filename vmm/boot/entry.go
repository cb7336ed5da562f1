package boot

import "github.com/smolvm/smol/kvm"

// Protocol is how the kernel is entered.
type Protocol string

// Entry protocols.
const (
	// ProtocolPVH: 32-bit protected mode, paging off, EBX = hvm_start_info.
	ProtocolPVH Protocol = "pvh"
	// ProtocolLinux64: long mode on identity-mapped page tables, RSI =
	// boot_params.
	ProtocolLinux64 Protocol = "linux64"
)

// Entry describes how vCPU 0 must start to run the loaded kernel, and where
// the loader put things (for logs, tests and debugging).
type Entry struct {
	Protocol Protocol
	// Regs holds vCPU 0's general-purpose registers at entry.
	Regs kvm.Regs

	KernelStart, KernelEnd uint64 // guest memory the kernel occupies
	InitrdAddr, InitrdSize uint64 // 0, 0 without an initrd
	// BootInfoAddr is where the boot information is: the zero page for
	// ProtocolLinux64, hvm_start_info for ProtocolPVH.
	BootInfoAddr uint64
	RSDPAddr     uint64
	// MemoryMap is the e820 map given to the kernel.
	MemoryMap []E820Entry
}

// Control register bits.
const (
	cr0PE   = 1 << 0  // protected mode
	cr0ET   = 1 << 4  // extension type: always 1 on modern CPUs
	cr0PG   = 1 << 31 // paging
	cr4PAE  = 1 << 5  // physical address extension, required for long mode
	eferLME = 1 << 8  // long mode enable
	eferLMA = 1 << 10 // long mode active
)

// rflagsReserved is bit 1 of RFLAGS, which always reads as 1. Everything
// else is 0: in particular IF, so no interrupt arrives before the kernel
// has an IDT.
const rflagsReserved = 1 << 1

// SetupSregs changes a vCPU's special registers (as read with
// KVM_GET_SREGS) to the state the entry protocol requires: segments loaded
// from the GDT the loader wrote, and the processor mode. The IDT and LDT are
// left as they are; interrupts stay disabled until the kernel installs its
// own IDT.
func (e *Entry) SetupSregs(s *kvm.Sregs) {
	t := gdt(e.Protocol)
	s.CS = segmentFromDescriptor(codeSelector, t[codeSelector/8])
	data := segmentFromDescriptor(dataSelector, t[dataSelector/8])
	s.DS, s.ES, s.FS, s.GS, s.SS = data, data, data, data, data
	s.TR = segmentFromDescriptor(tssSelector, t[tssSelector/8])
	s.GDT = kvm.DTable{Base: GDTAddr, Limit: 8*gdtEntries - 1}

	switch e.Protocol {
	case ProtocolPVH:
		// Caching stays enabled (CD and NW clear), unlike the reset state.
		s.CR0 = cr0PE | cr0ET
		s.CR3, s.CR4, s.EFER = 0, 0, 0
	default:
		s.CR0 = cr0PE | cr0ET | cr0PG
		s.CR3 = PML4Addr
		s.CR4 = cr4PAE
		s.EFER = eferLME | eferLMA
	}
}

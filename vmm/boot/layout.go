package boot

// Guest physical memory layout for boot. Everything the VMM writes besides
// the kernel and initrd lives below 1 MiB, in RAM Linux reserves for itself
// early anyway, so none of it can collide with the kernel (loaded at 1 MiB
// or above) or the initrd (placed as high as possible).
//
//	address     size      what
//	0x0000_1000 4 KiB     GDT: null, null, code 0x10, data 0x18, TSS 0x20
//	0x0000_6000 4 KiB     PVH hvm_start_info, its module list and memory map
//	0x0000_7000 4 KiB     zero page (struct boot_params), 64-bit protocol
//	0x0000_8000 4 KiB     boot stack (RSP starts at its top, 16-byte aligned)
//	0x0000_9000 4 KiB     PML4
//	0x0000_A000 4 KiB     PDPT
//	0x0000_B000 16 KiB    four page directories: 4 GiB in 2 MiB pages
//	0x0002_0000 64 KiB    kernel command line, NUL-terminated
//	0x0009_FC00 ...       reserved to 1 MiB: where a PC has its EBDA, VGA
//	                      memory and BIOS ROM
//	0x000E_0000 128 KiB   ACPI tables, RSDP first (Linux scans
//	                      0xE0000-0xFFFFF for "RSD PTR ")
//	0x0010_0000           kernel (at its physical load address, >= 1 MiB)
const (
	GDTAddr       uint64 = 0x1000
	StartInfoAddr uint64 = 0x6000
	ModlistAddr   uint64 = StartInfoAddr + 0x40  // one hvm_modlist_entry (32 bytes)
	MemmapAddr    uint64 = StartInfoAddr + 0x100 // hvm_memmap_table_entry array
	ZeroPageAddr  uint64 = 0x7000
	BootStackTop  uint64 = 0x8ff0
	PML4Addr      uint64 = 0x9000
	PDPTAddr      uint64 = 0xA000
	PDAddr        uint64 = 0xB000
	CmdlineAddr   uint64 = 0x20000
	BIOSAreaStart uint64 = 0x9FC00
	ACPIAddr      uint64 = 0xE0000
	HighMemStart  uint64 = 0x100000
)

const (
	pageSize = 4096

	// startInfoAreaEnd bounds the PVH structures: the memory map must end
	// before the zero page's page.
	startInfoAreaEnd = ZeroPageAddr

	// cmdlineAreaSize is the room reserved for the command line including
	// its NUL terminator.
	cmdlineAreaSize = 0x10000

	// acpiAreaSize is the room for ACPI tables: up to 1 MiB.
	acpiAreaSize = HighMemStart - ACPIAddr

	// identityMapSize is how much of the address space the boot page tables
	// map 1:1. Four GiB covers all RAM below the MMIO hole, the kernel, the
	// initrd and every boot structure, which is what the 64-bit boot
	// protocol requires; the kernel builds its own tables for the rest.
	identityMapSize = 4 << 30
)

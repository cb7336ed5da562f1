// Package boot loads a Linux kernel, its initrd and command line into guest
// memory with no firmware, and describes the CPU state vCPU 0 must start in.
//
// A PC normally boots through firmware that sets up memory maps and tables
// and a bootloader that unpacks the kernel. smol does both jobs itself, then
// starts vCPU 0 directly at the kernel's entry point. Two entry protocols are
// supported, chosen by what the kernel file offers:
//
//   - PVH (an uncompressed vmlinux ELF with a XEN_ELFNOTE_PHYS32_ENTRY note):
//     the CPU starts in 32-bit protected mode, paging off, with EBX pointing
//     at an hvm_start_info structure that holds the command line, the initrd
//     and the memory map. This is the fastest path: nothing to decompress,
//     no page tables to build.
//   - the Linux 64-bit boot protocol (a vmlinux without the note, or a
//     bzImage): the CPU starts in long mode on identity-mapped page tables
//     with RSI pointing at a "zero page" (struct boot_params).
//
// Either way the guest also gets ACPI tables (package acpi) in the legacy
// BIOS area, where Linux finds its CPUs and its power-off and reset
// registers, and an e820-style memory map that keeps that area reserved.
//
// Kernel and initrd files come from the user, so they are parsed
// defensively: headers are read through io.ReaderAt before anything large
// is copied, every offset and size is checked against the file and against
// guest memory with overflow-safe arithmetic, and mistakes come back as
// typed errors (ErrNotKernel, ErrTruncated, *ArchError, *SizeError,
// ErrCmdlineTooLong, ...) whose messages fit on one line.
//
// The fixed guest addresses used for boot structures are in layout.go.
package boot

package boot

import (
	"errors"
	"fmt"
)

// Errors for mistakes in what the user asked to boot. Use errors.Is: the
// returned errors wrap these with details.
var (
	// ErrNotKernel: the file is neither an ELF nor a bzImage (a text file,
	// a compressed archive, a disk image...).
	ErrNotKernel = errors.New("not a Linux kernel (want an x86-64 vmlinux ELF or a bzImage)")
	// ErrTruncated: the file starts like a kernel but ends too early.
	ErrTruncated = errors.New("kernel image is truncated")
	// ErrInvalidKernel: the headers are inconsistent or describe something
	// no loader can honour (an entry point outside the image, a segment
	// over the VMM's boot structures).
	ErrInvalidKernel = errors.New("invalid kernel image")
	// ErrUnsupportedKernel: a well-formed kernel this loader cannot start
	// (a boot protocol older than 2.12, a bzImage without a 64-bit entry).
	ErrUnsupportedKernel = errors.New("unsupported kernel")
	// ErrWrongArch is wrapped by *ArchError.
	ErrWrongArch = errors.New("kernel is for another architecture")
	// ErrKernelTooBig and ErrInitrdTooBig are wrapped by *SizeError.
	ErrKernelTooBig = errors.New("kernel does not fit in guest memory")
	ErrInitrdTooBig = errors.New("initrd does not fit in guest memory")
	// ErrCmdlineTooLong: the command line exceeds what the kernel accepts.
	ErrCmdlineTooLong = errors.New("kernel command line too long")
)

// ArchError reports an ELF file built for another machine, e.g. an arm64
// kernel handed to an x86-64 VMM.
type ArchError struct {
	// Machine names what the file is for ("aarch64", "386", "32-bit x86-64").
	Machine string
}

func (e *ArchError) Error() string { return fmt.Sprintf("ELF for %s, want x86-64", e.Machine) }

// Unwrap makes errors.Is(err, ErrWrongArch) true.
func (e *ArchError) Unwrap() error { return ErrWrongArch }

// SizeError reports a kernel or initrd that guest memory cannot hold.
type SizeError struct {
	Err    error  // ErrKernelTooBig or ErrInitrdTooBig
	What   string // "kernel" or "initrd"
	Size   uint64 // bytes needed
	Addr   uint64 // where it must go, when fixed (kernels); 0 if it could go anywhere
	Memory uint64 // guest RAM in bytes
}

func (e *SizeError) Error() string {
	if e.Addr != 0 {
		return fmt.Sprintf("%s (%s at %s) does not fit in guest memory (%s)",
			e.What, humanSize(e.Size), humanSize(e.Addr), humanSize(e.Memory))
	}
	return fmt.Sprintf("%s (%s) does not fit in guest memory (%s)", e.What, humanSize(e.Size), humanSize(e.Memory))
}

// Unwrap makes errors.Is(err, ErrKernelTooBig/ErrInitrdTooBig) true.
func (e *SizeError) Unwrap() error { return e.Err }

// humanSize prints a byte count in the largest binary unit that keeps it
// readable, rounding up so that "does not fit" never shows equal numbers
// for different sizes unless they really are within a unit.
func humanSize(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", (n+(1<<20)-1)>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", (n+(1<<10)-1)>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

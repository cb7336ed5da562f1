package boot

import (
	"fmt"
	"io"

	"github.com/smolvm/smol/vmm/memory"
)

// linuxCommandLineSize is x86 Linux's COMMAND_LINE_SIZE, including the NUL.
// A vmlinux carries no header saying how long a command line it accepts, and
// the kernel silently truncates a longer one, so the loader refuses it.
const linuxCommandLineSize = 2048

// kernelImage is a parsed, validated kernel and the plan to load it.
type kernelImage struct {
	protocol   Protocol
	entry      uint64 // where vCPU 0 starts
	start, end uint64 // guest memory the kernel occupies
	cmdlineMax uint64 // longest command line, excluding the NUL
	// initrdLimit is the first address the initrd must stay below.
	initrdLimit uint64
	elf         *elfKernel // exactly one of elf and bz is set
	bz          *bzKernel
}

// parseKernel identifies the kernel format from its first bytes and
// validates its headers.
func parseKernel(r io.ReaderAt, size int64) (*kernelImage, error) {
	var magic [4]byte
	if n, err := r.ReadAt(magic[:], 0); n < len(magic) {
		if err != nil && err != io.EOF {
			return nil, err
		}
		return nil, ErrNotKernel
	}
	if string(magic[:]) == "\x7fELF" {
		e, err := parseELF(r, size)
		if err != nil {
			return nil, err
		}
		k := &kernelImage{
			protocol:    ProtocolLinux64,
			entry:       e.entry,
			start:       e.start,
			end:         e.end,
			cmdlineMax:  linuxCommandLineSize - 1,
			initrdLimit: 1 << 32,
			elf:         e,
		}
		if e.hasPVH {
			k.protocol, k.entry = ProtocolPVH, e.pvhEntry
		}
		return k, nil
	}
	bz, err := parseBzImage(r, size)
	if err != nil {
		return nil, err
	}
	return &kernelImage{
		protocol:    ProtocolLinux64,
		entry:       bz.entry,
		start:       bz.start,
		end:         bz.end,
		cmdlineMax:  min(bz.cmdlineMax, cmdlineAreaSize-1),
		initrdLimit: bz.initrdAddrMax + 1,
		bz:          bz,
	}, nil
}

// checkFits makes sure the kernel lies in RAM above the boot structures.
func (k *kernelImage) checkFits(mem *memory.Guest) error {
	if k.start < HighMemStart {
		return fmt.Errorf("%w: kernel at %#x overlaps the boot structures below 1 MiB", ErrInvalidKernel, k.start)
	}
	if k.end > mem.LowEnd() {
		return &SizeError{Err: ErrKernelTooBig, What: "kernel", Size: k.end - k.start, Addr: k.start, Memory: mem.Size()}
	}
	return nil
}

// load copies the kernel into guest memory, streaming from the file.
func (k *kernelImage) load(mem *memory.Guest, r io.ReaderAt) error {
	if k.bz != nil {
		return copyToGuest(mem, r, k.bz.pmOffset, k.bz.loadAddr, k.bz.pmSize, k.bz.pmSize)
	}
	for i, s := range k.elf.segments {
		if err := copyToGuest(mem, r, s.offset, s.paddr, s.filesz, s.memsz); err != nil {
			return fmt.Errorf("segment %d: %w", i, err)
		}
	}
	return nil
}

// copyToGuest copies filesz bytes at file offset off to guest address addr
// and zeroes the rest of memsz (an ELF segment's .bss).
func copyToGuest(mem *memory.Guest, r io.ReaderAt, off, addr, filesz, memsz uint64) error {
	dst, err := mem.Slice(addr, memsz)
	if err != nil {
		return err
	}
	if _, err := io.ReadFull(io.NewSectionReader(r, int64(off), int64(filesz)), dst[:filesz]); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return fmt.Errorf("%w: file shrank while loading", ErrTruncated)
		}
		return err
	}
	clear(dst[filesz:])
	return nil
}

package boot

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/smolvm/smol/vmm/acpi"
	"github.com/smolvm/smol/vmm/memory"
)

// Config says what to boot.
type Config struct {
	Kernel  string // path to a vmlinux ELF or a bzImage
	Initrd  string // path to an initrd/initramfs; empty for none
	Cmdline string
	ACPI    acpi.Config
}

// Load validates the kernel, initrd and command line, writes them and the
// boot structures (ACPI tables, memory map, boot information, GDT, page
// tables) into guest memory, and returns vCPU 0's entry state. Everything is
// validated before anything is written.
func Load(mem *memory.Guest, cfg Config) (*Entry, error) {
	kf, ksize, err := openRegular(cfg.Kernel, "kernel")
	if err != nil {
		return nil, err
	}
	defer kf.Close()
	k, err := parseKernel(kf, ksize)
	if err != nil {
		return nil, fmt.Errorf("load kernel %s: %w", cfg.Kernel, err)
	}
	if err := k.checkFits(mem); err != nil {
		return nil, err
	}
	if err := checkCmdline(cfg.Cmdline, k.cmdlineMax); err != nil {
		return nil, err
	}

	var initrd *os.File
	var initrdSize, initrdAddr uint64
	if cfg.Initrd != "" {
		f, size, err := openRegular(cfg.Initrd, "initrd")
		if err != nil {
			return nil, err
		}
		defer f.Close()
		initrd, initrdSize = f, uint64(size)
		if initrdAddr, err = placeInitrd(mem, k, initrdSize); err != nil {
			return nil, err
		}
	}

	tables, rsdp, err := acpi.Build(cfg.ACPI, ACPIAddr)
	if err != nil {
		return nil, err
	}
	if uint64(len(tables)) > acpiAreaSize {
		return nil, fmt.Errorf("ACPI tables (%d bytes) exceed their %d-byte area", len(tables), acpiAreaSize)
	}

	// Validation is done; write guest memory.
	if err := k.load(mem, kf); err != nil {
		return nil, fmt.Errorf("load kernel %s: %w", cfg.Kernel, err)
	}
	if initrd != nil {
		if err := copyToGuest(mem, initrd, 0, initrdAddr, initrdSize, initrdSize); err != nil {
			return nil, fmt.Errorf("load initrd %s: %w", cfg.Initrd, err)
		}
	}
	if _, err := mem.WriteAt(tables, int64(ACPIAddr)); err != nil {
		return nil, fmt.Errorf("write ACPI tables: %w", err)
	}
	if _, err := mem.WriteAt(append([]byte(cfg.Cmdline), 0), int64(CmdlineAddr)); err != nil {
		return nil, fmt.Errorf("write command line: %w", err)
	}
	if err := writeGDT(mem, k.protocol); err != nil {
		return nil, err
	}

	info := bootInfo{
		cmdlineAddr: CmdlineAddr,
		initrdAddr:  initrdAddr,
		initrdSize:  initrdSize,
		rsdpAddr:    rsdp,
		memoryMap:   memoryMap(mem.Regions()),
	}
	e := &Entry{
		Protocol:    k.protocol,
		KernelStart: k.start,
		KernelEnd:   k.end,
		InitrdAddr:  initrdAddr,
		InitrdSize:  initrdSize,
		RSDPAddr:    rsdp,
		MemoryMap:   info.memoryMap,
	}
	e.Regs.RIP = k.entry
	e.Regs.RFLAGS = rflagsReserved

	switch k.protocol {
	case ProtocolPVH:
		if err := writeStartInfo(mem, info); err != nil {
			return nil, err
		}
		e.BootInfoAddr = StartInfoAddr
		e.Regs.RBX = StartInfoAddr
	default:
		var header []byte
		var version uint16
		if k.bz != nil {
			header, version = k.bz.header, k.bz.version
		}
		if _, err := mem.WriteAt(buildZeroPage(header, version, info), int64(ZeroPageAddr)); err != nil {
			return nil, fmt.Errorf("write zero page: %w", err)
		}
		if err := writeIdentityPageTables(mem); err != nil {
			return nil, err
		}
		e.BootInfoAddr = ZeroPageAddr
		e.Regs.RSI = ZeroPageAddr
		e.Regs.RSP, e.Regs.RBP = BootStackTop, BootStackTop
	}
	return e, nil
}

// openRegular opens a file the user named and returns its size, refusing
// directories and devices, whose size says nothing about their content.
func openRegular(path, what string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", what, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open %s: %w", what, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		if what == "kernel" {
			return nil, 0, fmt.Errorf("load kernel %s: %w: not a regular file", path, ErrNotKernel)
		}
		return nil, 0, fmt.Errorf("load %s %s: not a regular file", what, path)
	}
	return f, st.Size(), nil
}

// checkCmdline refuses a command line the kernel would truncate or cut
// short at an embedded NUL.
func checkCmdline(cmdline string, maxLen uint64) error {
	if uint64(len(cmdline)) > maxLen {
		return fmt.Errorf("%w: %d bytes, the kernel accepts at most %d", ErrCmdlineTooLong, len(cmdline), maxLen)
	}
	if strings.IndexByte(cmdline, 0) >= 0 {
		return errors.New("kernel command line contains a NUL byte")
	}
	return nil
}

// placeInitrd puts the initrd page-aligned as high as possible below both
// the end of low RAM and the kernel's limit, and above the kernel: high, so
// that the kernel's early allocations near its image stay free.
func placeInitrd(mem *memory.Guest, k *kernelImage, size uint64) (uint64, error) {
	if size == 0 {
		return 0, errors.New("initrd is empty")
	}
	tooBig := &SizeError{Err: ErrInitrdTooBig, What: "initrd", Size: size, Memory: mem.Size()}
	top := min(mem.LowEnd(), k.initrdLimit)
	floor := (k.end + pageSize - 1) &^ (pageSize - 1)
	if size > top {
		return 0, tooBig
	}
	addr := (top - size) &^ (pageSize - 1)
	if addr < floor {
		return 0, tooBig
	}
	return addr, nil
}

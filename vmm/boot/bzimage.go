package boot

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Offsets in a bzImage (and in boot_params, which embeds the same setup
// header at the same offsets). See the kernel's Documentation/x86/boot.rst.
const (
	hdrSetupSects      = 0x1f1
	hdrSyssize         = 0x1f4
	hdrBootFlag        = 0x1fe
	hdrJump            = 0x200 // 2-byte short jump; its second byte sets the header's end
	hdrMagic           = 0x202
	hdrVersion         = 0x206
	hdrTypeOfLoader    = 0x210
	hdrLoadflags       = 0x211
	hdrRamdiskImage    = 0x218
	hdrRamdiskSize     = 0x21c
	hdrHeapEndPtr      = 0x224
	hdrCmdLinePtr      = 0x228
	hdrInitrdAddrMax   = 0x22c
	hdrKernelAlignment = 0x230
	hdrRelocatable     = 0x234
	hdrXloadflags      = 0x236
	hdrCmdlineSize     = 0x238
	hdrPrefAddress     = 0x258
	hdrInitSize        = 0x260
	hdrMinEnd          = 0x264 // the fields above must all be present

	// hdrMaxEnd is where the setup header's room in boot_params ends; a
	// newer kernel's longer header is copied only up to here.
	hdrMaxEnd = 0x290

	bootFlagMagic = 0xAA55
	hdrSMagic     = "HdrS"

	// minProtocol is boot protocol 2.12, the first with xloadflags and
	// so the first where a loader can tell that the 64-bit entry exists.
	minProtocol = 0x020c
	// rsdpProtocol is 2.14, which added boot_params.acpi_rsdp_addr.
	rsdpProtocol = 0x020e

	xlfKernel64 = 1 << 0

	sectorSize         = 512
	defaultSetupSects  = 4 // setup_sects 0 means 4 (ancient kernels)
	startup64Offset    = 0x200
	defaultBzImageLoad = HighMemStart
)

// bzKernel is what the loader needs from a bzImage.
type bzKernel struct {
	header        []byte // bytes [0x1f1, hdrEnd) of the image: the setup header
	version       uint16 // boot protocol, e.g. 0x020f for 2.15
	pmOffset      uint64 // file offset of the protected-mode kernel
	pmSize        uint64 // its size
	loadAddr      uint64 // where it is copied
	start, end    uint64 // memory the kernel occupies until it reads the memory map
	entry         uint64 // the 64-bit entry point
	cmdlineMax    uint64 // longest command line, excluding the NUL
	initrdAddrMax uint64 // highest address the initrd's last byte may have
}

// parseBzImage validates a bzImage's setup header and decides where its
// protected-mode part goes. It reads only the header.
func parseBzImage(r io.ReaderAt, size int64) (*bzKernel, error) {
	buf := make([]byte, hdrMaxEnd)
	n, err := r.ReadAt(buf, 0)
	if n < hdrMagic+4 {
		if err != nil && err != io.EOF {
			return nil, err
		}
		return nil, ErrNotKernel
	}
	if string(buf[hdrMagic:hdrMagic+4]) != hdrSMagic {
		return nil, ErrNotKernel
	}
	hdrEnd := min(hdrMagic+int(buf[hdrJump+1]), hdrMaxEnd)
	if hdrEnd > n {
		return nil, fmt.Errorf("%w: setup header ends at %#x, file has %d bytes", ErrTruncated, hdrEnd, n)
	}
	le := binary.LittleEndian
	if flag := le.Uint16(buf[hdrBootFlag:]); flag != bootFlagMagic {
		return nil, fmt.Errorf("%w: boot flag %#04x, want %#04x", ErrInvalidKernel, flag, bootFlagMagic)
	}
	k := &bzKernel{version: le.Uint16(buf[hdrVersion:])}
	if k.version < minProtocol {
		return nil, fmt.Errorf("%w: bzImage boot protocol %d.%02d, want 2.12 or later",
			ErrUnsupportedKernel, k.version>>8, k.version&0xff)
	}
	if hdrEnd < hdrMinEnd {
		return nil, fmt.Errorf("%w: protocol %d.%02d setup header ends at %#x, before init_size",
			ErrInvalidKernel, k.version>>8, k.version&0xff, hdrEnd)
	}
	if le.Uint16(buf[hdrXloadflags:])&xlfKernel64 == 0 {
		return nil, fmt.Errorf("%w: bzImage has no 64-bit entry point (XLF_KERNEL_64)", ErrUnsupportedKernel)
	}
	k.header = append([]byte(nil), buf[hdrSetupSects:hdrEnd]...)

	setupSects := uint64(buf[hdrSetupSects])
	if setupSects == 0 {
		setupSects = defaultSetupSects
	}
	k.pmOffset = (setupSects + 1) * sectorSize
	if uint64(size) <= k.pmOffset {
		return nil, fmt.Errorf("%w: %d setup sectors but the file has %d bytes", ErrTruncated, setupSects, size)
	}
	k.pmSize = uint64(size) - k.pmOffset
	if want := uint64(le.Uint32(buf[hdrSyssize:])) * 16; want > k.pmSize {
		return nil, fmt.Errorf("%w: protected-mode kernel is %d bytes, header says %d", ErrTruncated, k.pmSize, want)
	}

	initSize := uint64(le.Uint32(buf[hdrInitSize:]))
	if initSize == 0 {
		return nil, fmt.Errorf("%w: init_size is 0", ErrInvalidKernel)
	}
	prefAddr := le.Uint64(buf[hdrPrefAddress:])
	align := uint64(le.Uint32(buf[hdrKernelAlignment:]))
	relocatable := buf[hdrRelocatable] != 0

	// Where the kernel runs from until it has read the memory map is what
	// init_size is measured from: the load address for a relocatable
	// kernel, pref_address (its link-time address) for one that is not.
	// A non-relocatable kernel is loaded at 1 MiB and moves itself there.
	var runtime uint64
	if relocatable {
		k.loadAddr = prefAddr
		if k.loadAddr < HighMemStart {
			k.loadAddr = HighMemStart
		}
		if align != 0 && align&(align-1) == 0 && k.loadAddr%align != 0 {
			if k.loadAddr+align < k.loadAddr {
				return nil, fmt.Errorf("%w: pref_address %#x", ErrInvalidKernel, prefAddr)
			}
			k.loadAddr = (k.loadAddr + align - 1) &^ (align - 1)
		}
		runtime = k.loadAddr
	} else {
		k.loadAddr = defaultBzImageLoad
		runtime = max(prefAddr, HighMemStart)
	}
	if k.loadAddr+k.pmSize < k.loadAddr || runtime+initSize < runtime {
		return nil, fmt.Errorf("%w: kernel at %#x does not fit the address space", ErrInvalidKernel, k.loadAddr)
	}
	k.start = min(k.loadAddr, runtime)
	k.end = max(k.loadAddr+k.pmSize, runtime+initSize)
	k.entry = k.loadAddr + startup64Offset

	k.cmdlineMax = uint64(le.Uint32(buf[hdrCmdlineSize:]))
	k.initrdAddrMax = uint64(le.Uint32(buf[hdrInitrdAddrMax:]))
	return k, nil
}

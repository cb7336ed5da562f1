package boot

import "encoding/binary"

// Offsets in struct boot_params (the "zero page") outside the setup header,
// and values the loader writes. See Documentation/x86/zero-page.rst.
const (
	zeroPageSize      = 4096
	bpACPIRSDPAddr    = 0x070
	bpExtRamdiskImage = 0x0c0
	bpExtRamdiskSize  = 0x0c4
	bpExtCmdLinePtr   = 0x0c8
	bpE820Entries     = 0x1e8
	bpE820Table       = 0x2d0

	loadflagLoadedHigh = 1 << 0 // protected-mode code is at 1 MiB or above
	loadflagCanUseHeap = 1 << 7 // heap_end_ptr is valid

	// heapEndPtr is the end of the real-mode setup heap, relative to the
	// setup code. The 64-bit entry never runs that code, but the protocol
	// asks loaders to fill it and the kernel may look at it.
	heapEndPtr = 0xfe00

	// typeOfLoaderUndefined is the ID for a boot loader with no assigned
	// number.
	typeOfLoaderUndefined = 0xff

	// synthesizedProtocol is the boot protocol version written into the
	// zero page for a vmlinux, which has no setup header of its own: 2.15,
	// whose fields (up to acpi_rsdp_addr) this loader fills.
	synthesizedProtocol = 0x020f
)

// bootInfo is what the kernel is told, by either protocol.
type bootInfo struct {
	cmdlineAddr            uint64
	initrdAddr, initrdSize uint64
	rsdpAddr               uint64
	memoryMap              []E820Entry
}

// buildZeroPage returns the boot_params page for the 64-bit boot protocol.
// For a bzImage, header is the image's own setup header, copied in as the
// protocol requires so that the kernel sees the values it was built with;
// for a vmlinux it is nil and the loader writes the few header fields the
// kernel reads.
func buildZeroPage(header []byte, version uint16, info bootInfo) []byte {
	le := binary.LittleEndian
	zp := make([]byte, zeroPageSize)
	if header != nil {
		copy(zp[hdrSetupSects:hdrMaxEnd], header)
	} else {
		version = synthesizedProtocol
		le.PutUint16(zp[hdrBootFlag:], bootFlagMagic)
		copy(zp[hdrMagic:], hdrSMagic)
		le.PutUint16(zp[hdrVersion:], version)
		le.PutUint32(zp[hdrCmdlineSize:], linuxCommandLineSize-1)
	}
	zp[hdrTypeOfLoader] = typeOfLoaderUndefined
	zp[hdrLoadflags] |= loadflagLoadedHigh | loadflagCanUseHeap
	le.PutUint16(zp[hdrHeapEndPtr:], heapEndPtr)

	le.PutUint32(zp[hdrCmdLinePtr:], uint32(info.cmdlineAddr))
	le.PutUint32(zp[bpExtCmdLinePtr:], uint32(info.cmdlineAddr>>32))
	le.PutUint32(zp[hdrRamdiskImage:], uint32(info.initrdAddr))
	le.PutUint32(zp[hdrRamdiskSize:], uint32(info.initrdSize))
	le.PutUint32(zp[bpExtRamdiskImage:], uint32(info.initrdAddr>>32))
	le.PutUint32(zp[bpExtRamdiskSize:], uint32(info.initrdSize>>32))

	// Before 2.14 these bytes were padding the kernel did not read.
	if version >= rsdpProtocol {
		le.PutUint64(zp[bpACPIRSDPAddr:], info.rsdpAddr)
	}

	zp[bpE820Entries] = uint8(len(info.memoryMap))
	putE820(zp[bpE820Table:], info.memoryMap)
	return zp
}

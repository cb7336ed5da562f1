package acpi

import (
	"fmt"
)

// tableAlign is the alignment of each table in the blob. Only the RSDP needs
// 16 bytes (Linux scans for it on 16-byte boundaries); the rest are aligned
// the same way for tidiness in hexdumps.
const tableAlign = 16

// Build returns the ACPI tables laid out to be copied to guest physical
// address base, and the address of the RSDP, the table the guest is given a
// pointer to. The RSDP comes first, so base must be 16-byte aligned.
func Build(cfg Config, base uint64) (tables []byte, rsdpAddr uint64, err error) {
	if err := cfg.validate(); err != nil {
		return nil, 0, err
	}
	if base%tableAlign != 0 {
		return nil, 0, fmt.Errorf("acpi: table address %#x is not %d-byte aligned", base, tableAlign)
	}

	dsdt := buildDSDT(cfg)
	madt := buildMADT(cfg.CPUs, cfg.LegacyPIC)

	// Lay the tables out first: the XSDT and FADT hold the addresses of the
	// others, so every address must be known before they are built.
	rsdpOff := 0
	xsdtOff := alignUp(rsdpOff+rsdpSize, tableAlign)
	fadtOff := alignUp(xsdtOff+xsdtSize(2), tableAlign)
	dsdtOff := alignUp(fadtOff+fadtSize, tableAlign)
	madtOff := alignUp(dsdtOff+len(dsdt), tableAlign)
	end := madtOff + len(madt)
	if base+uint64(end) < base {
		return nil, 0, fmt.Errorf("acpi: tables at %#x wrap around the address space", base)
	}

	fadt := buildFADT(cfg, base+uint64(dsdtOff))
	xsdt := buildXSDT(base+uint64(fadtOff), base+uint64(madtOff))
	rsdp := buildRSDP(base + uint64(xsdtOff))

	tables = make([]byte, end)
	copy(tables[rsdpOff:], rsdp)
	copy(tables[xsdtOff:], xsdt)
	copy(tables[fadtOff:], fadt)
	copy(tables[dsdtOff:], dsdt)
	copy(tables[madtOff:], madt)
	return tables, base + uint64(rsdpOff), nil
}

func alignUp(n, align int) int { return (n + align - 1) / align * align }

// RSDP (Root System Description Pointer), ACPI 2.0+ form. It is not a table
// with the common header: it has its own signature and two checksums, one
// over the ACPI 1.0 part (the first 20 bytes) and one over all of it.
const (
	rsdpSize        = 36
	rsdpV1Size      = 20
	rsdpChecksum    = 8
	rsdpRevision    = 15
	rsdpLength      = 20
	rsdpXSDTAddr    = 24
	rsdpExtChecksum = 32
)

func buildRSDP(xsdtAddr uint64) []byte {
	r := make([]byte, rsdpSize)
	copy(r[0:8], "RSD PTR ")
	copy(r[9:15], oemID[:])
	// Revision 2 means "ACPI 2.0 or later: use the XSDT". The 32-bit RSDT
	// address at offset 16 stays zero: there is no RSDT.
	r[rsdpRevision] = 2
	le.PutUint32(r[rsdpLength:], rsdpSize)
	le.PutUint64(r[rsdpXSDTAddr:], xsdtAddr)
	r[rsdpChecksum] = checksum(r[:rsdpV1Size])
	r[rsdpExtChecksum] = checksum(r)
	return r
}

// XSDT (Extended System Description Table): the header followed by the
// 64-bit addresses of every other top-level table. The DSDT is not listed:
// the FADT points at it.
func xsdtSize(entries int) int { return headerSize + 8*entries }

func buildXSDT(addrs ...uint64) []byte {
	t := newTable("XSDT", xsdtSize(len(addrs)), 1)
	for i, a := range addrs {
		le.PutUint64(t[headerSize+8*i:], a)
	}
	sealTable(t)
	return t
}

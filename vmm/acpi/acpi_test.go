package acpi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

const testBase = 0xE0000

func testConfig(cpus int) Config {
	return Config{CPUs: cpus, SleepControlPort: 0x3c0, SleepStatusPort: 0x3c1, ResetPort: 0x3c2, ResetValue: 0x42}
}

// parsed is the tables found by walking the blob from the RSDP the way a
// guest OS does: RSDP -> XSDT -> FADT -> DSDT, XSDT -> MADT.
type parsed struct {
	xsdt, fadt, dsdt, madt []byte
}

func sum(b []byte) uint8 {
	var s uint8
	for _, x := range b {
		s += x
	}
	return s
}

// table returns the table at guest address addr, checking its header.
func table(t *testing.T, blob []byte, addr uint64, signature string) []byte {
	t.Helper()
	if addr < testBase || addr-testBase+headerSize > uint64(len(blob)) {
		t.Fatalf("%s address %#x outside the tables [%#x, +%#x)", signature, addr, testBase, len(blob))
	}
	off := addr - testBase
	length := uint64(binary.LittleEndian.Uint32(blob[off+4:]))
	if length < headerSize || off+length > uint64(len(blob)) {
		t.Fatalf("%s length %d does not fit", signature, length)
	}
	tb := blob[off : off+length]
	if got := string(tb[:4]); got != signature {
		t.Fatalf("table at %#x is %q, want %q", addr, got, signature)
	}
	if s := sum(tb); s != 0 {
		t.Errorf("%s checksum: bytes sum to %#x, want 0", signature, s)
	}
	return tb
}

func parse(t *testing.T, blob []byte, rsdpAddr uint64) parsed {
	t.Helper()
	if rsdpAddr != testBase || rsdpAddr%16 != 0 {
		t.Fatalf("RSDP at %#x, want %#x", rsdpAddr, testBase)
	}
	rsdp := blob[:rsdpSize]
	if string(rsdp[:8]) != "RSD PTR " {
		t.Fatalf("RSDP signature %q", rsdp[:8])
	}
	if sum(rsdp[:20]) != 0 || sum(rsdp) != 0 {
		t.Fatalf("RSDP checksums: v1 part sums to %#x, whole to %#x", sum(rsdp[:20]), sum(rsdp))
	}
	if rsdp[15] != 2 || binary.LittleEndian.Uint32(rsdp[20:]) != rsdpSize {
		t.Fatalf("RSDP revision %d length %d", rsdp[15], binary.LittleEndian.Uint32(rsdp[20:]))
	}
	var p parsed
	p.xsdt = table(t, blob, binary.LittleEndian.Uint64(rsdp[24:]), "XSDT")
	entries := (len(p.xsdt) - headerSize) / 8
	if entries != 2 || (len(p.xsdt)-headerSize)%8 != 0 {
		t.Fatalf("XSDT has %d bytes of entries, want two 8-byte entries", len(p.xsdt)-headerSize)
	}
	p.fadt = table(t, blob, binary.LittleEndian.Uint64(p.xsdt[headerSize:]), "FACP")
	p.madt = table(t, blob, binary.LittleEndian.Uint64(p.xsdt[headerSize+8:]), "APIC")
	p.dsdt = table(t, blob, binary.LittleEndian.Uint64(p.fadt[fadtXDSDT:]), "DSDT")
	return p
}

func TestTablesParseBack(t *testing.T) {
	for _, cpus := range []int{1, 2, 7, MaxCPUs} {
		blob, rsdp, err := Build(testConfig(cpus), testBase)
		if err != nil {
			t.Fatalf("%d CPUs: %v", cpus, err)
		}
		p := parse(t, blob, rsdp)

		// MADT: one enabled local APIC per CPU with APIC ID = index, then
		// exactly one I/O APIC and nothing else.
		if got := binary.LittleEndian.Uint32(p.madt[headerSize:]); got != 0xFEE00000 {
			t.Errorf("local APIC address %#x", got)
		}
		var lapics, ioapics int
		for off := madtFixedSize; off < len(p.madt); {
			typ, length := p.madt[off], int(p.madt[off+1])
			if length < 2 || off+length > len(p.madt) {
				t.Fatalf("MADT entry at %d has length %d", off, length)
			}
			e := p.madt[off : off+length]
			switch typ {
			case madtTypeLAPIC:
				if int(e[2]) != lapics || int(e[3]) != lapics || binary.LittleEndian.Uint32(e[4:])&1 == 0 {
					t.Errorf("LAPIC entry %d = % x", lapics, e)
				}
				lapics++
			case madtTypeIOAPIC:
				if binary.LittleEndian.Uint32(e[4:]) != 0xFEC00000 || binary.LittleEndian.Uint32(e[8:]) != 0 {
					t.Errorf("I/O APIC entry % x", e)
				}
				ioapics++
			default:
				t.Errorf("unexpected MADT entry type %d", typ)
			}
			off += length
		}
		if lapics != cpus || ioapics != 1 {
			t.Errorf("%d CPUs: MADT has %d local APICs and %d I/O APICs", cpus, lapics, ioapics)
		}
	}
}

// The MADT claims the 8259 pair (PCAT_COMPAT) only for a machine that has
// it: the split irqchip has none.
func TestMADTFlagsThePICsOnlyWhenPresent(t *testing.T) {
	for _, legacyPIC := range []bool{false, true} {
		cfg := testConfig(1)
		cfg.LegacyPIC = legacyPIC
		blob, rsdp, err := Build(cfg, testBase)
		if err != nil {
			t.Fatal(err)
		}
		flags := binary.LittleEndian.Uint32(parse(t, blob, rsdp).madt[headerSize+4:])
		if got := flags&madtPCATCompat != 0; got != legacyPIC {
			t.Errorf("LegacyPIC %v: MADT flags %#x", legacyPIC, flags)
		}
	}
}

func TestFADTDescribesHardwareReducedPower(t *testing.T) {
	cfg := testConfig(2)
	blob, rsdp, err := Build(cfg, testBase)
	if err != nil {
		t.Fatal(err)
	}
	f := parse(t, blob, rsdp).fadt
	if len(f) != 276 || f[8] != 6 || f[fadtMinorVersionAt] != 3 {
		t.Fatalf("FADT length %d revision %d.%d, want 276 bytes, 6.3", len(f), f[8], f[fadtMinorVersionAt])
	}
	flags := binary.LittleEndian.Uint32(f[fadtFlags:])
	if flags&(1<<20) == 0 || flags&(1<<10) == 0 {
		t.Errorf("flags %#x lack HW_REDUCED_ACPI or RESET_REG_SUP", flags)
	}
	gas := func(off int, port uint16) {
		t.Helper()
		want := []byte{1, 8, 0, 1, byte(port), byte(port >> 8), 0, 0, 0, 0, 0, 0}
		if got := f[off : off+12]; !bytes.Equal(got, want) {
			t.Errorf("GAS at %d = % x, want % x", off, got, want)
		}
	}
	gas(fadtResetReg, cfg.ResetPort)
	gas(fadtSleepControl, cfg.SleepControlPort)
	gas(fadtSleepStatus, cfg.SleepStatusPort)
	if f[fadtResetValue] != cfg.ResetValue {
		t.Errorf("reset value %#x", f[fadtResetValue])
	}
	// Legacy fixed hardware must be absent: SCI, SMI command, PM1a/b
	// event and control, PM2, PM timer and GPE blocks (offsets 46..87).
	for i := 46; i < 88; i++ {
		if f[i] != 0 {
			t.Fatalf("legacy FADT byte %d = %#x, want 0", i, f[i])
		}
	}
	arch := binary.LittleEndian.Uint16(f[fadtIAPCBootArch:])
	if arch&bootArchNoCMOSRTC == 0 || arch&bootArchNoVGA == 0 || arch&bootArch8042 != 0 {
		t.Errorf("IA-PC boot flags %#x", arch)
	}

	cfg.CMOSRTC = true
	blob, rsdp, err = Build(cfg, testBase)
	if err != nil {
		t.Fatal(err)
	}
	f = parse(t, blob, rsdp).fadt
	if arch := binary.LittleEndian.Uint16(f[fadtIAPCBootArch:]); arch&bootArchNoCMOSRTC != 0 {
		t.Errorf("with a CMOS RTC the FADT still says none (%#x)", arch)
	}
}

// TestDSDTDefinesS5 decodes the DSDT's AML: one NameOp defining _S5_ as a
// package whose first element is the S5 sleep type.
func TestDSDTDefinesS5(t *testing.T) {
	blob, rsdp, err := Build(testConfig(1), testBase)
	if err != nil {
		t.Fatal(err)
	}
	aml := parse(t, blob, rsdp).dsdt[headerSize:]
	if len(aml) < 6 || aml[0] != 0x08 || string(aml[1:5]) != "_S5_" || aml[5] != 0x12 {
		t.Fatalf("AML % x is not Name(_S5_, Package...)", aml)
	}
	pkg := aml[6:]
	pkgLen := int(pkg[0])
	if pkgLen&0xC0 != 0 || pkgLen != len(pkg) {
		t.Fatalf("package length %d, %d bytes remain", pkgLen, len(pkg))
	}
	count, elems := pkg[1], pkg[2:]
	var values []uint64
	for len(elems) > 0 {
		switch elems[0] {
		case 0x00: // ZeroOp
			values, elems = append(values, 0), elems[1:]
		case 0x01: // OneOp
			values, elems = append(values, 1), elems[1:]
		case 0x0A: // BytePrefix
			if len(elems) < 2 {
				t.Fatal("truncated BytePrefix")
			}
			values, elems = append(values, uint64(elems[1])), elems[2:]
		default:
			t.Fatalf("unexpected AML opcode %#x", elems[0])
		}
	}
	if int(count) != len(values) || len(values) != 2 || values[0] != SleepTypeS5 || values[1] != 0 {
		t.Fatalf("_S5 = %v (NumElements %d), want [5 0]", values, count)
	}
	if SleepControlPoweroff != 0x34 {
		t.Fatalf("SleepControlPoweroff = %#x, want 0x34", SleepControlPoweroff)
	}
}

func TestBuildRejectsBadConfig(t *testing.T) {
	bad := []Config{
		testConfig(0),
		testConfig(MaxCPUs + 1),
		{CPUs: 1, SleepControlPort: 0x3c0, SleepStatusPort: 0x3c1}, // no reset port
		{CPUs: 1, SleepControlPort: 0x3c0, SleepStatusPort: 0x3c0, ResetPort: 1},
	}
	for _, c := range bad {
		if _, _, err := Build(c, testBase); err == nil {
			t.Errorf("Build(%+v) succeeded", c)
		}
	}
	if _, _, err := Build(testConfig(1), testBase+8); err == nil {
		t.Error("Build at a misaligned address succeeded")
	}
	if _, _, err := Build(testConfig(1), ^uint64(0)&^15); err == nil {
		t.Error("Build at the top of the address space succeeded")
	}
}

func TestTablesFitInBIOSArea(t *testing.T) {
	blob, _, err := Build(testConfig(MaxCPUs), testBase)
	if err != nil {
		t.Fatal(err)
	}
	if len(blob) > 8192 {
		t.Errorf("tables for %d CPUs take %d bytes", MaxCPUs, len(blob))
	}
}

func TestDSDTDescribesDevices(t *testing.T) {
	cfg := testConfig(1)
	cfg.Serial = []SerialPort{{Port: 0x3F8, GSI: 4}}
	for i := range 20 { // enough devices to need multi-byte PkgLengths
		cfg.VirtioMMIO = append(cfg.VirtioMMIO, VirtioMMIODevice{Addr: 0xD000_0000 + uint64(i)*0x1000, Size: 0x1000, GSI: uint32(5 + i%18)})
	}
	cfg.VirtioMMIO = cfg.VirtioMMIO[:18] // GSIs 5..22, all distinct
	blob, rsdp, err := Build(cfg, testBase)
	if err != nil {
		t.Fatal(err)
	}
	names, err := decodeAML(parse(t, blob, rsdp).dsdt[headerSize:])
	if err != nil {
		t.Fatal(err)
	}
	if s5, ok := names[`\_S5_`].([]any); !ok || len(s5) != 2 || s5[0] != uint64(5) {
		t.Errorf(`\_S5_ = %v`, names[`\_S5_`])
	}
	if names[`\_SB_.COM0._HID`] != "PNP0501" || names[`\_SB_.COM0._UID`] != uint64(0) {
		t.Errorf("serial port: _HID %v _UID %v", names[`\_SB_.COM0._HID`], names[`\_SB_.COM0._UID`])
	}
	crs := decodeResources(t, names[`\_SB_.COM0._CRS`].([]byte))
	if len(crs) != 2 || crs[0] != (resource{kind: "io", base: 0x3F8, size: 8}) || crs[1] != (resource{kind: "irq", base: 4, flags: 3}) {
		t.Errorf("serial _CRS %+v", crs)
	}
	for i, d := range cfg.VirtioMMIO {
		dev := fmt.Sprintf(`\_SB_.V%03X`, i)
		if names[dev+"._HID"] != "LNRO0005" || names[dev+"._UID"] != uint64(i) {
			t.Errorf("%s: _HID %v _UID %v", dev, names[dev+"._HID"], names[dev+"._UID"])
		}
		buf, _ := names[dev+"._CRS"].([]byte)
		crs := decodeResources(t, buf)
		want := []resource{{kind: "mem32", base: d.Addr, size: d.Size, flags: 1}, {kind: "irq", base: uint64(d.GSI), flags: 3}}
		if len(crs) != 2 || crs[0] != want[0] || crs[1] != want[1] {
			t.Errorf("%s _CRS %+v, want %+v", dev, crs, want)
		}
	}
}

func TestDeviceValidation(t *testing.T) {
	bad := map[string]func(*Config){
		"GSI 0":  func(c *Config) { c.Serial = []SerialPort{{Port: 0x3F8, GSI: 0}} },
		"GSI 24": func(c *Config) { c.VirtioMMIO = []VirtioMMIODevice{{Addr: 0xD0000000, Size: 0x200, GSI: 24}} },
		"shared GSI": func(c *Config) {
			c.Serial = []SerialPort{{Port: 0x3F8, GSI: 5}}
			c.VirtioMMIO = []VirtioMMIODevice{{Addr: 0xD0000000, Size: 0x200, GSI: 5}}
		},
		"window above 4G": func(c *Config) { c.VirtioMMIO = []VirtioMMIODevice{{Addr: 0xFFFFF000, Size: 0x2000, GSI: 5}} },
		"empty window":    func(c *Config) { c.VirtioMMIO = []VirtioMMIODevice{{Addr: 0xD0000000, GSI: 5}} },
		"4 GiB window":    func(c *Config) { c.VirtioMMIO = []VirtioMMIODevice{{Addr: 0, Size: 1 << 32, GSI: 5}} },
		"serial at 0":     func(c *Config) { c.Serial = []SerialPort{{Port: 0, GSI: 4}} },
		"serial wraps":    func(c *Config) { c.Serial = []SerialPort{{Port: 0xFFFC, GSI: 4}} },
	}
	for name, mutate := range bad {
		c := testConfig(1)
		mutate(&c)
		if _, _, err := Build(c, testBase); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

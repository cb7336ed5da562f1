package acpi

import "fmt"

// A few AML (ACPI Machine Language) encoders: just what the DSDT's device
// descriptions need. AML is the bytecode the guest's ACPI interpreter runs;
// these produce the same bytes an ASL compiler would for the equivalent
// source, shown in each comment.

// AML opcodes.
const (
	amlZeroOp       = 0x00
	amlOneOp        = 0x01
	amlNameOp       = 0x08
	amlBytePrefix   = 0x0A
	amlWordPrefix   = 0x0B
	amlDWordPrefix  = 0x0C
	amlStringPrefix = 0x0D
	amlQWordPrefix  = 0x0E
	amlScopeOp      = 0x10
	amlBufferOp     = 0x11
	amlPackageOp    = 0x12
	amlExtOpPrefix  = 0x5B
	amlDeviceOp     = 0x82 // after amlExtOpPrefix
	amlRootChar     = '\\'
)

// amlPkgLength encodes the PkgLength that precedes a package, buffer,
// scope or device whose contents are n bytes long. The encoded value counts
// the PkgLength bytes themselves: one byte holds up to 63; longer lengths
// use 1-3 extra bytes, with the low 4 bits in the lead byte.
func amlPkgLength(n int) []byte {
	if n+1 <= 0x3F {
		return []byte{byte(n + 1)}
	}
	for extra := 1; extra <= 3; extra++ {
		total := n + 1 + extra
		if total < 1<<(4+8*extra) {
			b := []byte{byte(extra<<6) | byte(total&0xF)}
			for i := range extra {
				b = append(b, byte(total>>(4+8*i)))
			}
			return b
		}
	}
	// Callers build a few hundred bytes; 256 MiB of AML is a bug.
	panic(fmt.Sprintf("acpi: AML package of %d bytes", n))
}

// amlNameSeg checks a 4-character name segment (A-Z, 0-9, _; not starting
// with a digit), which is all AML names are made of.
func amlNameSeg(name string) []byte {
	if len(name) != 4 || name[0] >= '0' && name[0] <= '9' {
		panic("acpi: bad AML name " + name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			panic("acpi: bad AML name " + name)
		}
	}
	return []byte(name)
}

// amlName encodes Name (NAME, value).
func amlName(name string, value []byte) []byte {
	return append(append([]byte{amlNameOp}, amlNameSeg(name)...), value...)
}

// amlString encodes a string constant "s".
func amlString(s string) []byte {
	return append(append([]byte{amlStringPrefix}, s...), 0)
}

// amlInteger encodes an integer constant in its shortest form.
func amlInteger(v uint64) []byte {
	switch {
	case v == 0:
		return []byte{amlZeroOp}
	case v == 1:
		return []byte{amlOneOp}
	case v <= 0xFF:
		return []byte{amlBytePrefix, byte(v)}
	case v <= 0xFFFF:
		return []byte{amlWordPrefix, byte(v), byte(v >> 8)}
	case v <= 0xFFFF_FFFF:
		return le.AppendUint32([]byte{amlDWordPrefix}, uint32(v))
	}
	return le.AppendUint64([]byte{amlQWordPrefix}, v)
}

// amlBuffer encodes Buffer () { data }.
func amlBuffer(data []byte) []byte {
	body := append(amlInteger(uint64(len(data))), data...)
	return append(append([]byte{amlBufferOp}, amlPkgLength(len(body))...), body...)
}

// amlDevice encodes Device (NAME) { body }.
func amlDevice(name string, body ...[]byte) []byte {
	content := amlNameSeg(name)
	for _, b := range body {
		content = append(content, b...)
	}
	return append(append([]byte{amlExtOpPrefix, amlDeviceOp}, amlPkgLength(len(content))...), content...)
}

// amlScope encodes Scope (\NAME) { body } for a name under the root.
func amlScope(rootName string, body ...[]byte) []byte {
	content := append([]byte{amlRootChar}, amlNameSeg(rootName)...)
	for _, b := range body {
		content = append(content, b...)
	}
	return append(append([]byte{amlScopeOp}, amlPkgLength(len(content))...), content...)
}

// Resource descriptors, the contents of a _CRS buffer
// (ResourceTemplate () { ... } in ASL).

// resMemory32Fixed encodes Memory32Fixed (ReadWrite, base, size).
func resMemory32Fixed(base, size uint32) []byte {
	b := []byte{0x86, 9, 0, 1} // large item 0x06, 9 bytes follow; writable
	b = le.AppendUint32(b, base)
	return le.AppendUint32(b, size)
}

// resIO encodes IO (Decode16, port, port, 1, length): a fixed range of
// I/O ports.
func resIO(port uint16, length uint8) []byte {
	b := []byte{0x47, 1} // small item 0x08, 7 bytes; 16-bit decode
	b = le.AppendUint16(b, port)
	b = le.AppendUint16(b, port)
	return append(b, 1, length)
}

// resInterrupt encodes
// Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive) { gsi }.
func resInterrupt(gsi uint32) []byte {
	const consumer, edge = 1 << 0, 1 << 1
	b := []byte{0x89, 6, 0, consumer | edge, 1} // large item 0x09, 6 bytes; one interrupt
	return le.AppendUint32(b, gsi)
}

// resEnd encodes the end tag; a zero checksum means "not checksummed".
func resEnd() []byte { return []byte{0x79, 0} }

// resourceTemplate joins descriptors into a _CRS buffer.
func resourceTemplate(items ...[]byte) []byte {
	var b []byte
	for _, it := range items {
		b = append(b, it...)
	}
	return amlBuffer(append(b, resEnd()...))
}

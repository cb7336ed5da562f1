package acpi

// s5AML is the DSDT's whole body: the AML encoding of
//
//	Name (_S5, Package () { 5, 0 })
//
// It tells the OS which SLP_TYP values put the machine in S5 ("soft off"):
// SLP_TYPa = 5 (the one a hardware-reduced platform uses, written into the
// sleep control register) and SLP_TYPb = 0. Without \_S5 Linux has no ACPI
// power-off and halts instead. Hand-encoded so that building a VM needs no
// ASL compiler.
var s5AML = []byte{
	0x08,               // NameOp: define a named object
	'_', 'S', '5', '_', // NameString "_S5_" (names are 4 chars, '_'-padded)
	0x12,        // PackageOp
	0x05,        // PkgLength: 5 bytes, counting itself, to the package's end
	0x02,        // NumElements: 2
	0x0A,        // BytePrefix: a one-byte integer follows
	SleepTypeS5, // element 0, SLP_TYPa = 5
	0x00,        // ZeroOp: element 1, SLP_TYPb = 0
}

// DSDT revision 2: AML integers are 64 bits wide.
const dsdtRevision = 2

func buildDSDT() []byte {
	t := newTable("DSDT", headerSize+len(s5AML), dsdtRevision)
	copy(t[headerSize:], s5AML)
	sealTable(t)
	return t
}

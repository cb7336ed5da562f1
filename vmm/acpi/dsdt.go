package acpi

import "fmt"

// s5AML starts the DSDT's body: the AML encoding of
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

func buildDSDT(cfg Config) []byte {
	aml := append([]byte(nil), s5AML...)
	aml = append(aml, devicesAML(cfg)...)
	t := newTable("DSDT", headerSize+len(aml), dsdtRevision)
	copy(t[headerSize:], aml)
	sealTable(t)
	return t
}

// devicesAML describes the VMM's devices under the system bus:
//
//	Scope (\_SB) {
//	    Device (COM0) {
//	        Name (_HID, "PNP0501")
//	        Name (_UID, 0)
//	        Name (_CRS, ResourceTemplate () {
//	            IO (Decode16, 0x3F8, 0x3F8, 1, 8)
//	            Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive) { 4 }
//	        })
//	    }
//	    Device (V000) {
//	        Name (_HID, "LNRO0005")
//	        Name (_UID, 0)
//	        Name (_CRS, ResourceTemplate () {
//	            Memory32Fixed (ReadWrite, 0xD0000000, 0x1000)
//	            Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive) { 5 }
//	        })
//	    }
//	    ...
//	    Device (PEVT) {
//	        Name (_HID, "QEMU0001")
//	        Name (_CRS, ResourceTemplate () { IO (Decode16, 0x505, 0x505, 1, 1) })
//	    }
//	}
//
// Interrupts are declared edge-triggered, active high: that is how the VMM
// raises them (irqfd or KVM_IRQ_LINE pulses), and what Linux assumes for
// GSIs below 16 with no override anyway.
func devicesAML(cfg Config) []byte {
	if len(cfg.Serial) == 0 && len(cfg.VirtioMMIO) == 0 && cfg.PanicPort == 0 {
		return nil
	}
	var devices [][]byte
	for i, s := range cfg.Serial {
		devices = append(devices, amlDevice(fmt.Sprintf("COM%d", i),
			amlName("_HID", amlString("PNP0501")),
			amlName("_UID", amlInteger(uint64(i))),
			amlName("_CRS", resourceTemplate(resIO(s.Port, 8), resInterrupt(s.GSI)))))
	}
	for i, d := range cfg.VirtioMMIO {
		devices = append(devices, amlDevice(fmt.Sprintf("V%03X", i),
			amlName("_HID", amlString("LNRO0005")),
			amlName("_UID", amlInteger(uint64(i))),
			amlName("_CRS", resourceTemplate(resMemory32Fixed(uint32(d.Addr), uint32(d.Size)), resInterrupt(d.GSI)))))
	}
	if cfg.PanicPort != 0 {
		devices = append(devices, amlDevice("PEVT",
			amlName("_HID", amlString("QEMU0001")),
			amlName("_CRS", resourceTemplate(resIO(cfg.PanicPort, 1)))))
	}
	return amlScope("_SB_", devices...)
}

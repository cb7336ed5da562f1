package acpi

// MADT (Multiple APIC Description Table), revision 5 (ACPI 6.3): where the
// interrupt controllers are and which CPUs exist. Linux builds its CPU list
// from the Processor Local APIC entries; without a MADT (and with no MP
// table) it would run on one CPU.
//
// There are deliberately no Interrupt Source Override entries. On a real PC
// the firmware declares "ISA IRQ 0 is GSI 2", because the PIT's output is
// wired to I/O APIC pin 2. KVM's default GSI routing, which smol keeps, maps
// GSI n to I/O APIC pin n (and, for n < 16, to PIC input n), and the
// in-kernel PIT raises GSI 0, so IRQ 0 really arrives on pin 0. With no
// override Linux assumes exactly that identity mapping for ISA IRQs 0-15,
// edge-triggered, active high, which is how KVM's PIT, the serial port and
// irqfd-driven edge interrupts behave. An IRQ0->GSI2 override would send the
// timer to a pin nothing drives. (A hardware-reduced guest does not use the
// PIT for its clock anyway, but the description must still be true.)
const (
	madtRevision    = 5
	madtFixedSize   = headerSize + 8 // + local APIC address + flags
	madtLAPICSize   = 8
	madtIOAPICSize  = 12
	madtTypeLAPIC   = 0
	madtTypeIOAPIC  = 1
	madtLAPICEnable = 1 << 0
	// madtPCATCompat: the machine also has dual 8259 PICs.
	madtPCATCompat = 1 << 0
)

func buildMADT(cpus int, legacyPIC bool) []byte {
	t := newTable("APIC", madtFixedSize+cpus*madtLAPICSize+madtIOAPICSize, madtRevision)
	le.PutUint32(t[headerSize:], LocalAPICAddr)
	if legacyPIC {
		le.PutUint32(t[headerSize+4:], madtPCATCompat)
	}

	off := madtFixedSize
	for i := 0; i < cpus; i++ {
		e := t[off : off+madtLAPICSize]
		e[0] = madtTypeLAPIC
		e[1] = madtLAPICSize
		e[2] = uint8(i) // ACPI processor UID
		e[3] = uint8(i) // local APIC ID: vCPU i's KVM vcpu id
		le.PutUint32(e[4:], madtLAPICEnable)
		off += madtLAPICSize
	}

	e := t[off : off+madtIOAPICSize]
	e[0] = madtTypeIOAPIC
	e[1] = madtIOAPICSize
	e[2] = IOAPICID
	e[3] = 0 // reserved
	le.PutUint32(e[4:], IOAPICAddr)
	le.PutUint32(e[8:], 0) // global system interrupt base: pin 0 is GSI 0
	sealTable(t)
	return t
}

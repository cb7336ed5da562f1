// Package testkernel makes tiny fake kernels for tests: ELF64 images whose
// one segment holds a few hand-assembled instructions, entered through the
// 64-bit boot protocol like a vmlinux without a PVH note.
package testkernel

import "encoding/binary"

// LoadAddr is where the code is loaded and entered: 16 MiB, where a real
// vmlinux's first segment goes.
const LoadAddr = 0x100_0000

// Machine numbers for ELF e_machine.
const (
	MachineX86_64  = 62
	MachineAArch64 = 183
)

// ELF returns an ELF64 executable for machine with code at LoadAddr.
func ELF(machine uint16, code []byte) []byte {
	const ehsize, phsize = 64, 56
	b := make([]byte, ehsize+phsize+len(code))
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little-endian, version 1
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2) // ET_EXEC
	le.PutUint16(b[18:], machine)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], LoadAddr) // entry
	le.PutUint64(b[32:], ehsize)   // program headers follow the ELF header
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1)
	ph := b[ehsize:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // R+X
	le.PutUint64(ph[8:], ehsize+phsize)
	le.PutUint64(ph[16:], 0xffff_ffff_8000_0000+LoadAddr) // vaddr, as in Linux
	le.PutUint64(ph[24:], LoadAddr)                       // paddr
	le.PutUint64(ph[32:], uint64(len(code)))
	le.PutUint64(ph[40:], uint64(len(code)))
	copy(b[ehsize+phsize:], code)
	return b
}

// x86-64 instruction encodings used by the programs below.
func movDX(port uint16) []byte { return []byte{0x66, 0xba, byte(port), byte(port >> 8)} }
func movAL(v byte) []byte      { return []byte{0xb0, v} }

var outDXAL = []byte{0xee}

// Print returns code that writes s to the COM1 data register, one OUT per
// byte, the way a kernel's early console would.
func Print(s string) []byte {
	code := movDX(0x3f8)
	for i := 0; i < len(s); i++ {
		code = append(code, movAL(s[i])...)
		code = append(code, outDXAL...)
	}
	return code
}

// PowerOff returns code that enters ACPI S5 through the sleep control
// register at port (SLP_TYP=5, SLP_EN), then halts.
func PowerOff(port uint16) []byte {
	code := movDX(port)
	code = append(code, movAL(5<<2|1<<5)...)
	code = append(code, outDXAL...)
	return append(code, 0xf4) // hlt
}

// Garbage is an undefined instruction: with no IDT the CPU triple-faults.
var Garbage = []byte{0x0f, 0x0b, 0xf4}

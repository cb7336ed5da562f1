package boot

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// An ELF64 file is parsed by hand rather than with debug/elf: the loader
// needs only the file header, the program headers and the notes, and doing
// it here keeps every size and offset check visible and bounded.
const (
	elfHeaderSize  = 64
	elfPhdrSize    = 56
	elfMaxPhdrs    = 256     // vmlinux has about 5; more is garbage
	elfMaxNoteSize = 1 << 20 // notes are a few hundred bytes in practice
)

// pvhNoteName and pvhNoteType identify the note that holds the PVH 32-bit
// entry point (Xen's XEN_ELFNOTE_PHYS32_ENTRY, which Linux emits when built
// with CONFIG_PVH).
const (
	pvhNoteName = "Xen"
	pvhNoteType = 18
)

// elfSegment is one PT_LOAD program header, validated against the file.
type elfSegment struct {
	offset uint64 // in the file
	paddr  uint64 // guest physical load address
	filesz uint64 // bytes copied from the file
	memsz  uint64 // bytes occupied in memory; the rest after filesz is zeroed
}

// elfKernel is what the loader needs from a vmlinux.
type elfKernel struct {
	segments []elfSegment
	entry    uint64 // 64-bit entry point, physical
	pvhEntry uint64 // PVH 32-bit entry point, physical; valid if hasPVH
	hasPVH   bool
	start    uint64 // lowest physical address of any segment
	end      uint64 // first physical address after every segment
}

// parseELF validates an x86-64 vmlinux of the given size and returns its
// load plan. It reads only headers, so its cost does not depend on the size
// of the file.
func parseELF(r io.ReaderAt, size int64) (*elfKernel, error) {
	var hdr [elfHeaderSize]byte
	if err := readFull(r, hdr[:], 0, size); err != nil {
		return nil, fmt.Errorf("ELF header: %w", err)
	}
	if string(hdr[:4]) != elf.ELFMAG {
		return nil, ErrNotKernel
	}
	if err := checkELFIdent(hdr[:]); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if t := elf.Type(le.Uint16(hdr[16:])); t != elf.ET_EXEC {
		return nil, fmt.Errorf("%w: ELF type %v, want an executable (ET_EXEC)", ErrInvalidKernel, t)
	}
	entry := le.Uint64(hdr[24:])
	phoff := le.Uint64(hdr[32:])
	phentsize := le.Uint16(hdr[54:])
	phnum := le.Uint16(hdr[56:])
	if phentsize != elfPhdrSize {
		return nil, fmt.Errorf("%w: program header size %d, want %d", ErrInvalidKernel, phentsize, elfPhdrSize)
	}
	if phnum == 0 || phnum > elfMaxPhdrs {
		return nil, fmt.Errorf("%w: %d program headers, want 1 to %d", ErrInvalidKernel, phnum, elfMaxPhdrs)
	}
	phdrs := make([]byte, int(phnum)*elfPhdrSize)
	if phoff > uint64(size) {
		return nil, fmt.Errorf("%w: program headers at offset %d, file has %d bytes", ErrTruncated, phoff, size)
	}
	if err := readFull(r, phdrs, int64(phoff), size); err != nil {
		return nil, fmt.Errorf("program headers: %w", err)
	}

	k := &elfKernel{start: ^uint64(0)}
	for i := range int(phnum) {
		ph := phdrs[i*elfPhdrSize : (i+1)*elfPhdrSize]
		typ := elf.ProgType(le.Uint32(ph[0:]))
		seg := elfSegment{
			offset: le.Uint64(ph[8:]),
			paddr:  le.Uint64(ph[24:]),
			filesz: le.Uint64(ph[32:]),
			memsz:  le.Uint64(ph[40:]),
		}
		vaddr := le.Uint64(ph[16:])
		switch typ {
		case elf.PT_LOAD:
			if seg.memsz == 0 {
				continue
			}
			if err := checkSegment(i, seg, size); err != nil {
				return nil, err
			}
			if vaddr+seg.memsz < vaddr {
				return nil, fmt.Errorf("%w: segment %d virtual range wraps", ErrInvalidKernel, i)
			}
			// A vmlinux's e_entry is physical, but translate a virtual one
			// too rather than jump into unmapped space.
			if entry >= vaddr && entry-vaddr < seg.memsz && !(entry >= seg.paddr && entry-seg.paddr < seg.memsz) {
				entry = seg.paddr + (entry - vaddr)
			}
			k.segments = append(k.segments, seg)
			k.start = min(k.start, seg.paddr)
			k.end = max(k.end, seg.paddr+seg.memsz)
		case elf.PT_NOTE:
			if seg.filesz == 0 {
				continue
			}
			if seg.offset > uint64(size) || seg.filesz > uint64(size)-seg.offset {
				return nil, fmt.Errorf("%w: note segment %d ends past the end of the file", ErrTruncated, i)
			}
			if seg.filesz > elfMaxNoteSize {
				return nil, fmt.Errorf("%w: note segment %d is %d bytes", ErrInvalidKernel, i, seg.filesz)
			}
			notes := make([]byte, seg.filesz)
			if err := readFull(r, notes, int64(seg.offset), size); err != nil {
				return nil, fmt.Errorf("note segment %d: %w", i, err)
			}
			addr, found, err := findPVHEntry(notes)
			if err != nil {
				return nil, fmt.Errorf("note segment %d: %w", i, err)
			}
			if found {
				k.pvhEntry, k.hasPVH = addr, true
			}
		}
	}
	if len(k.segments) == 0 {
		return nil, fmt.Errorf("%w: no loadable segments", ErrInvalidKernel)
	}
	if !k.contains(entry) {
		return nil, fmt.Errorf("%w: entry point %#x is outside the loaded segments", ErrInvalidKernel, entry)
	}
	k.entry = entry
	if k.hasPVH && !k.contains(k.pvhEntry) {
		return nil, fmt.Errorf("%w: PVH entry point %#x is outside the loaded segments", ErrInvalidKernel, k.pvhEntry)
	}
	return k, nil
}

// checkELFIdent rejects ELF files that are not little-endian ELF64 for
// x86-64, naming the architecture they are for when it is another one.
func checkELFIdent(hdr []byte) error {
	class, data := elf.Class(hdr[elf.EI_CLASS]), elf.Data(hdr[elf.EI_DATA])
	var order binary.ByteOrder
	switch data {
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	default:
		return fmt.Errorf("%w: ELF data encoding %d", ErrInvalidKernel, data)
	}
	// e_machine is at offset 18 in both ELF32 and ELF64.
	machine := elf.Machine(order.Uint16(hdr[18:]))
	name := machineName(machine)
	switch {
	case machine != elf.EM_X86_64:
		if class == elf.ELFCLASS32 {
			name = "32-bit " + name
		}
		return &ArchError{Machine: name}
	case class != elf.ELFCLASS64:
		return &ArchError{Machine: "32-bit x86-64 (x32)"}
	case data != elf.ELFDATA2LSB:
		return &ArchError{Machine: "big-endian x86-64"}
	}
	if v := hdr[elf.EI_VERSION]; v != byte(elf.EV_CURRENT) {
		return fmt.Errorf("%w: ELF version %d", ErrInvalidKernel, v)
	}
	return nil
}

// machineName turns elf.EM_AARCH64 into "aarch64".
func machineName(m elf.Machine) string {
	return strings.ToLower(strings.TrimPrefix(m.String(), "EM_"))
}

// checkSegment validates a PT_LOAD header against the file: the part copied
// from the file must lie inside it, and no range may wrap.
func checkSegment(i int, s elfSegment, size int64) error {
	if s.filesz > s.memsz {
		return fmt.Errorf("%w: segment %d has %d bytes in the file but %d in memory", ErrInvalidKernel, i, s.filesz, s.memsz)
	}
	if s.paddr+s.memsz < s.paddr {
		return fmt.Errorf("%w: segment %d at %#x+%#x wraps", ErrInvalidKernel, i, s.paddr, s.memsz)
	}
	if s.offset > uint64(size) || s.filesz > uint64(size)-s.offset {
		return fmt.Errorf("%w: segment %d needs file bytes [%d, +%d), file has %d", ErrTruncated, i, s.offset, s.filesz, size)
	}
	return nil
}

func (k *elfKernel) contains(addr uint64) bool {
	for _, s := range k.segments {
		if addr >= s.paddr && addr-s.paddr < s.memsz {
			return true
		}
	}
	return false
}

// findPVHEntry looks through a PT_NOTE segment's notes for the PVH entry
// point. Each note is: namesz, descsz, type (4 bytes each), then the name
// and the descriptor, each padded to 4 bytes.
func findPVHEntry(notes []byte) (addr uint64, found bool, err error) {
	le := binary.LittleEndian
	for len(notes) > 0 {
		if len(notes) < 12 {
			return 0, false, fmt.Errorf("%w: %d stray bytes after the last note", ErrInvalidKernel, len(notes))
		}
		namesz, descsz, typ := uint64(le.Uint32(notes[0:])), uint64(le.Uint32(notes[4:])), le.Uint32(notes[8:])
		rest := notes[12:]
		nameEnd := align4(namesz)
		descEnd := nameEnd + align4(descsz)
		if descEnd > uint64(len(rest)) {
			return 0, false, fmt.Errorf("%w: note of %d+%d bytes overruns its segment", ErrInvalidKernel, namesz, descsz)
		}
		name := strings.TrimRight(string(rest[:namesz]), "\x00")
		desc := rest[nameEnd : nameEnd+descsz]
		if name == pvhNoteName && typ == pvhNoteType {
			switch len(desc) {
			case 4:
				addr = uint64(le.Uint32(desc))
			case 8:
				addr = le.Uint64(desc)
			default:
				return 0, false, fmt.Errorf("%w: PVH entry note has a %d-byte address", ErrInvalidKernel, len(desc))
			}
			if addr >= 1<<32 {
				return 0, false, fmt.Errorf("%w: PVH entry point %#x is above 4 GiB", ErrInvalidKernel, addr)
			}
			return addr, true, nil
		}
		notes = rest[descEnd:]
	}
	return 0, false, nil
}

// align4 rounds a 32-bit note size up to 4 bytes; the result fits in uint64.
func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// readFull reads len(p) bytes at off, reporting a short file as ErrTruncated.
func readFull(r io.ReaderAt, p []byte, off, size int64) error {
	if off < 0 || off > size || int64(len(p)) > size-off {
		return fmt.Errorf("%w: need bytes [%d, +%d), file has %d", ErrTruncated, off, len(p), size)
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: need bytes [%d, +%d), file has %d", ErrTruncated, off, len(p), off+int64(n))
	}
	return err
}

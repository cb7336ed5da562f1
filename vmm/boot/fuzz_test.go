package boot

import (
	"bytes"
	"testing"
)

// The parsers read user-supplied files: whatever the bytes, they must
// return an error or a plan whose every range lies inside the file and
// whose entry point lies inside what gets loaded.

func FuzzParseELF(f *testing.F) {
	f.Add(buildELF(defaultELF()))
	s := defaultELF()
	s.pvh = true
	f.Add(buildELF(s))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseELF(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, s := range k.segments {
			if s.offset+s.filesz > uint64(len(data)) || s.offset+s.filesz < s.offset || s.filesz > s.memsz {
				t.Fatalf("segment %+v escapes a %d-byte file", s, len(data))
			}
			if s.paddr+s.memsz < s.paddr || s.paddr < k.start || s.paddr+s.memsz > k.end {
				t.Fatalf("segment %+v outside [%#x, %#x)", s, k.start, k.end)
			}
		}
		if !k.contains(k.entry) || k.hasPVH && (!k.contains(k.pvhEntry) || k.pvhEntry >= 1<<32) {
			t.Fatalf("entry %#x / PVH %#x outside the segments", k.entry, k.pvhEntry)
		}
	})
}

func FuzzParseBzImage(f *testing.F) {
	f.Add(buildBzImage(defaultBz()))
	s := defaultBz()
	s.relocatable = false
	s.setupSects = 0
	f.Add(buildBzImage(s))
	f.Add(buildBzImage(defaultBz())[:0x300])
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseBzImage(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if k.pmOffset+k.pmSize != uint64(len(data)) || k.pmSize == 0 {
			t.Fatalf("protected-mode part [%d, +%d) in a %d-byte file", k.pmOffset, k.pmSize, len(data))
		}
		if len(k.header) > hdrMaxEnd-hdrSetupSects || k.version < minProtocol {
			t.Fatalf("header %d bytes, version %#x", len(k.header), k.version)
		}
		if k.start > k.loadAddr || k.loadAddr+k.pmSize > k.end || k.end < k.start || k.entry != k.loadAddr+startup64Offset || k.loadAddr < HighMemStart {
			t.Fatalf("plan %+v", k)
		}
		// The zero page built from any accepted header must keep the
		// loader's fields.
		zp := buildZeroPage(k.header, k.version, bootInfo{cmdlineAddr: CmdlineAddr, memoryMap: memoryMap(nil)})
		if len(zp) != zeroPageSize || zp[hdrTypeOfLoader] != typeOfLoaderUndefined || u32(zp, hdrCmdLinePtr) != CmdlineAddr {
			t.Fatal("zero page fields lost")
		}
	})
}

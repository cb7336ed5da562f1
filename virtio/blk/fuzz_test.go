package blk

import (
	"errors"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/vmm/memory"
)

// Where the fuzz target lays out the request in guest memory.
const (
	fuzzReadableAt = 0x1000
	fuzzWritableAt = 0x40000
	fuzzMaxLen     = 0x30000
)

// FuzzParseRequest feeds the parser arbitrary driver input: the readable
// bytes (header and payload) split into two buffers at split, a writable
// area of writableLen bytes split at writableSplit, the disk size and
// flags (bit 0 read-only, bit 1 DISCARD negotiated, bit 2 WRITE_ZEROES
// negotiated). Whatever the input, the parser must not panic, and what it
// accepts must respect the disk's bounds and the protocol's rules.
func FuzzParseRequest(f *testing.F) {
	f.Add(header(TypeIn, 0), uint8(0), uint16(513), uint8(0), uint64(8), uint8(6))
	f.Add(append(header(TypeOut, 7), make([]byte, 512)...), uint8(16), uint16(1), uint8(0), uint64(8), uint8(6))
	f.Add(header(TypeFlush, 0), uint8(3), uint16(1), uint8(0), uint64(8), uint8(0))
	f.Add(header(TypeGetID, 0), uint8(0), uint16(21), uint8(20), uint64(8), uint8(1))
	f.Add(append(header(TypeDiscard, 0), seg(1, 2, 0)...), uint8(20), uint16(1), uint8(0), uint64(8), uint8(6))
	f.Add(append(header(TypeWriteZeroes, 0), seg(6, 2, flagUnmap)...), uint8(0), uint16(1), uint8(0), uint64(8), uint8(6))
	f.Add(header(TypeIn, ^uint64(0)), uint8(0), uint16(1025), uint8(0), ^uint64(0), uint8(0))

	mem, err := memory.New(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })

	f.Fuzz(func(t *testing.T, readable []byte, split uint8, writableLen uint16, writableSplit uint8, sectors uint64, flags uint8) {
		if len(readable) > fuzzMaxLen {
			readable = readable[:fuzzMaxLen]
		}
		wlen := uint32(writableLen)
		clear(mem.Bytes()[fuzzWritableAt : fuzzWritableAt+fuzzMaxLen])
		mem.WriteAt(readable, fuzzReadableAt)
		rs := min(uint32(split), uint32(len(readable)))
		ws := min(uint32(writableSplit), wlen)
		in := []virtio.Buffer{{Addr: fuzzReadableAt, Len: rs}, {Addr: fuzzReadableAt + uint64(rs), Len: uint32(len(readable)) - rs}}
		out := []virtio.Buffer{{Addr: fuzzWritableAt, Len: ws}, {Addr: fuzzWritableAt + uint64(ws), Len: wlen - ws}}
		lim := limits{sectors: sectors, readOnly: flags&1 != 0}
		if flags&2 != 0 {
			lim.features |= FeatureDiscard
		}
		if flags&4 != 0 {
			lim.features |= FeatureWriteZeroes
		}

		req, err := parseRequest(mem, in, out, lim)
		if wlen == 0 {
			if !errors.Is(err, errNoStatus) || req.status != nil {
				t.Fatalf("no writable bytes: got %v", err)
			}
			return
		}
		if len(req.status) != 1 {
			t.Fatalf("status byte missing (err %v)", err)
		}
		// The status byte must be the last writable byte.
		req.status[0] = 0xA5
		if mem.Bytes()[fuzzWritableAt+wlen-1] != 0xA5 {
			t.Fatal("status byte is not the last writable byte")
		}
		if err != nil {
			var se *statusError
			if !errors.As(err, &se) || (se.status != StatusIOErr && se.status != StatusUnsupp) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkAccepted(t, req, lim, uint64(len(readable)), uint64(wlen))
	})
}

// checkAccepted states what an accepted request guarantees.
func checkAccepted(t *testing.T, req request, lim limits, readableLen, writableLen uint64) {
	t.Helper()
	if totalLen(req.data) != req.dataLen {
		t.Fatalf("dataLen %d but buffers hold %d", req.dataLen, totalLen(req.data))
	}
	switch req.kind {
	case TypeIn, TypeOut:
		if req.dataLen%SectorSize != 0 || req.dataLen > maxDataLen {
			t.Fatalf("accepted data length %d", req.dataLen)
		}
		end := req.sector + req.dataLen/SectorSize
		if end < req.sector || end > lim.sectors || end > maxSectors {
			t.Fatalf("accepted sectors [%d, +%d) on a %d-sector disk", req.sector, req.dataLen/SectorSize, lim.sectors)
		}
		if req.kind == TypeIn && req.dataLen != writableLen-1 {
			t.Fatalf("read payload %d of %d writable bytes", req.dataLen, writableLen)
		}
		if req.kind == TypeOut && (lim.readOnly || req.dataLen != readableLen-headerSize) {
			t.Fatalf("write accepted: read-only %v, payload %d of %d readable bytes", lim.readOnly, req.dataLen, readableLen)
		}
	case TypeDiscard, TypeWriteZeroes:
		if lim.readOnly || len(req.segments) == 0 || len(req.segments) > MaxDiscardSegs {
			t.Fatalf("accepted %d segments (read-only %v)", len(req.segments), lim.readOnly)
		}
		for _, s := range req.segments {
			end := s.sector + uint64(s.sectors)
			if end < s.sector || end > lim.sectors || s.sectors > MaxDiscardSectors || (s.unmap && req.kind == TypeDiscard) {
				t.Fatalf("accepted segment %+v on a %d-sector disk", s, lim.sectors)
			}
		}
	case TypeFlush, TypeGetID:
	default:
		t.Fatalf("accepted request type %d", req.kind)
	}
}

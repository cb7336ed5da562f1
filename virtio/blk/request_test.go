package blk

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/vmm/memory"
)

// guestMem is a small guest RAM with a bump allocator for test buffers.
type guestMem struct {
	t    *testing.T
	mem  *memory.Guest
	next uint64
}

func newGuestMem(t *testing.T) *guestMem {
	t.Helper()
	m, err := memory.New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &guestMem{t: t, mem: m, next: 0x1000}
}

// buf places data in guest memory and returns its buffer.
func (g *guestMem) buf(data []byte) virtio.Buffer {
	addr := g.next
	g.next += uint64(len(data)+15) &^ 15
	if _, err := g.mem.WriteAt(data, int64(addr)); err != nil {
		g.t.Fatal(err)
	}
	return virtio.Buffer{Addr: addr, Len: uint32(len(data))}
}

// space reserves n zeroed bytes.
func (g *guestMem) space(n int) virtio.Buffer { return g.buf(make([]byte, n)) }

func header(kind uint32, sector uint64) []byte {
	h := make([]byte, headerSize)
	binary.LittleEndian.PutUint32(h[0:], kind)
	binary.LittleEndian.PutUint32(h[4:], 0xdeadbeef) // reserved: ignored
	binary.LittleEndian.PutUint64(h[8:], sector)
	return h
}

func seg(sector uint64, sectors, flags uint32) []byte {
	s := make([]byte, segmentSize)
	binary.LittleEndian.PutUint64(s[0:], sector)
	binary.LittleEndian.PutUint32(s[8:], sectors)
	binary.LittleEndian.PutUint32(s[12:], flags)
	return s
}

const testSectors = 1000

var rwLimits = limits{sectors: testSectors, features: FeatureDiscard | FeatureWriteZeroes | FeatureFlush}

func TestParseValidRequests(t *testing.T) {
	g := newGuestMem(t)

	t.Run("read with header split and status sharing the data buffer", func(t *testing.T) {
		h := header(TypeIn, 10)
		req, err := parseRequest(g.mem, []virtio.Buffer{g.buf(h[:5]), g.buf(h[5:])},
			[]virtio.Buffer{g.space(512), g.space(1024 + 1)}, rwLimits)
		if err != nil {
			t.Fatal(err)
		}
		if req.kind != TypeIn || req.sector != 10 || req.dataLen != 1536 || len(req.data) != 2 || len(req.status) != 1 {
			t.Errorf("got kind %d sector %d len %d bufs %d", req.kind, req.sector, req.dataLen, len(req.data))
		}
	})
	t.Run("write at the last sector", func(t *testing.T) {
		req, err := parseRequest(g.mem, []virtio.Buffer{g.buf(header(TypeOut, testSectors-1)), g.space(512)},
			[]virtio.Buffer{g.space(1)}, rwLimits)
		if err != nil || req.dataLen != 512 || req.sector != testSectors-1 {
			t.Fatalf("got %+v, %v", req, err)
		}
	})
	t.Run("header and data in one buffer", func(t *testing.T) {
		b := append(header(TypeOut, 0), make([]byte, 1024)...)
		req, err := parseRequest(g.mem, []virtio.Buffer{g.buf(b)}, []virtio.Buffer{g.space(1)}, rwLimits)
		if err != nil || req.dataLen != 1024 {
			t.Fatalf("got len %d, %v", req.dataLen, err)
		}
	})
	t.Run("flush and get id", func(t *testing.T) {
		if _, err := parseRequest(g.mem, []virtio.Buffer{g.buf(header(TypeFlush, 12345678))}, []virtio.Buffer{g.space(1)}, rwLimits); err != nil {
			t.Error(err)
		}
		req, err := parseRequest(g.mem, []virtio.Buffer{g.buf(header(TypeGetID, 0))}, []virtio.Buffer{g.space(IDBytes + 1)}, rwLimits)
		if err != nil || req.dataLen != IDBytes {
			t.Errorf("get id: len %d, %v", req.dataLen, err)
		}
	})
	t.Run("discard and write zeroes segments", func(t *testing.T) {
		payload := append(seg(0, 8, 0), seg(testSectors-8, 8, 0)...)
		req, err := parseRequest(g.mem, []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(payload[:20]), g.buf(payload[20:])},
			[]virtio.Buffer{g.space(1)}, rwLimits)
		if err != nil || len(req.segments) != 2 || req.segments[1] != (segment{sector: testSectors - 8, sectors: 8}) {
			t.Fatalf("discard: %+v, %v", req.segments, err)
		}
		req, err = parseRequest(g.mem, []virtio.Buffer{g.buf(header(TypeWriteZeroes, 0)), g.buf(seg(5, 3, flagUnmap))},
			[]virtio.Buffer{g.space(1)}, rwLimits)
		if err != nil || len(req.segments) != 1 || !req.segments[0].unmap {
			t.Fatalf("write zeroes: %+v, %v", req.segments, err)
		}
	})
}

func TestParseRejectsMalformedRequests(t *testing.T) {
	g := newGuestMem(t)
	status := []virtio.Buffer{g.space(1)}
	ro := rwLimits
	ro.readOnly = true
	noDiscard := rwLimits
	noDiscard.features = 0
	tooMany := make([]byte, 0, (MaxDiscardSegs+1)*segmentSize)
	for i := 0; i <= MaxDiscardSegs; i++ {
		tooMany = append(tooMany, seg(uint64(i), 1, 0)...)
	}
	// A hostile chain may list one region many times over.
	overlapping := make([]virtio.Buffer, SegMax+1)
	for i := range overlapping {
		overlapping[i] = virtio.Buffer{Addr: 0, Len: SizeMax}
	}

	for _, tc := range []struct {
		name     string
		readable []virtio.Buffer
		writable []virtio.Buffer
		lim      limits
		status   uint8 // 0xff: no status byte (errNoStatus)
		reason   string
	}{
		{"no writable buffer", []virtio.Buffer{g.buf(header(TypeIn, 0))}, nil, rwLimits, 0xff, ""},
		{"only empty writable buffers", []virtio.Buffer{g.buf(header(TypeFlush, 0))}, []virtio.Buffer{{Addr: 0x1000, Len: 0}}, rwLimits, 0xff, ""},
		{"no header", nil, status, rwLimits, StatusIOErr, "header"},
		{"header too short", []virtio.Buffer{g.buf(header(TypeIn, 0)[:15])}, status, rwLimits, StatusIOErr, "header"},
		{"read length not a sector multiple", []virtio.Buffer{g.buf(header(TypeIn, 0))}, []virtio.Buffer{g.space(514)}, rwLimits, StatusIOErr, "multiple"},
		{"write length not a sector multiple", []virtio.Buffer{g.buf(header(TypeOut, 0)), g.space(100)}, status, rwLimits, StatusIOErr, "multiple"},
		{"read past the end", []virtio.Buffer{g.buf(header(TypeIn, testSectors-1))}, []virtio.Buffer{g.space(1024 + 1)}, rwLimits, StatusIOErr, "outside"},
		{"sector past the end", []virtio.Buffer{g.buf(header(TypeIn, testSectors+1))}, []virtio.Buffer{g.space(1)}, rwLimits, StatusIOErr, "outside"},
		{"sector overflows", []virtio.Buffer{g.buf(header(TypeOut, 1<<63)), g.space(512)}, status, limits{sectors: ^uint64(0)}, StatusIOErr, "outside"},
		{"sector plus length overflows", []virtio.Buffer{g.buf(header(TypeOut, ^uint64(0))), g.space(1024)}, status, limits{sectors: ^uint64(0)}, StatusIOErr, "outside"},
		{"data longer than seg_max*size_max", append([]virtio.Buffer{g.buf(header(TypeOut, 0))}, overlapping...), status, limits{sectors: 1 << 40}, StatusIOErr, "exceeds"},
		{"write to read-only", []virtio.Buffer{g.buf(header(TypeOut, 0)), g.space(512)}, status, ro, StatusIOErr, "read-only"},
		{"unknown type", []virtio.Buffer{g.buf(header(99, 0))}, status, rwLimits, StatusUnsupp, "type 99"},
		{"secure erase", []virtio.Buffer{g.buf(header(TypeSecureErase, 0)), g.buf(seg(0, 1, 0))}, status, rwLimits, StatusUnsupp, "type"},
		{"discard not negotiated", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(0, 1, 0))}, status, noDiscard, StatusUnsupp, "negotiated"},
		{"discard on read-only", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(0, 1, 0))}, status, ro, StatusIOErr, "read-only"},
		{"discard without segments", []virtio.Buffer{g.buf(header(TypeDiscard, 0))}, status, rwLimits, StatusIOErr, "segments"},
		{"discard partial segment", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(0, 1, 0)[:12])}, status, rwLimits, StatusIOErr, "segments"},
		{"discard too many segments", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(tooMany)}, status, rwLimits, StatusIOErr, "segments"},
		{"discard with unmap", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(0, 1, flagUnmap))}, status, rwLimits, StatusUnsupp, "unmap"},
		{"discard unknown flag", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(0, 1, 2))}, status, rwLimits, StatusUnsupp, "flags"},
		{"write zeroes unknown flag", []virtio.Buffer{g.buf(header(TypeWriteZeroes, 0)), g.buf(seg(0, 1, 0x80000001))}, status, rwLimits, StatusUnsupp, "flags"},
		{"discard segment too long", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(0, MaxDiscardSectors+1, 0))}, status, limits{sectors: 1 << 40, features: FeatureDiscard}, StatusIOErr, "max"},
		{"discard past the end", []virtio.Buffer{g.buf(header(TypeDiscard, 0)), g.buf(seg(testSectors-1, 2, 0))}, status, rwLimits, StatusIOErr, "outside"},
		{"write zeroes overflow", []virtio.Buffer{g.buf(header(TypeWriteZeroes, 0)), g.buf(seg(^uint64(0), 2, 0))}, status, limits{sectors: ^uint64(0), features: FeatureWriteZeroes}, StatusIOErr, "outside"},
		{"second segment bad", []virtio.Buffer{g.buf(header(TypeWriteZeroes, 0)), g.buf(append(seg(0, 1, 0), seg(testSectors, 1, 0)...))}, status, rwLimits, StatusIOErr, "outside"},
		{"readable buffer outside RAM", []virtio.Buffer{{Addr: 1 << 40, Len: 16}}, status, rwLimits, StatusIOErr, "readable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseRequest(g.mem, tc.readable, tc.writable, tc.lim)
			if err == nil {
				t.Fatalf("accepted: kind %d sector %d len %d", req.kind, req.sector, req.dataLen)
			}
			if tc.status == 0xff {
				if !errors.Is(err, errNoStatus) || req.status != nil {
					t.Fatalf("got %v with status %v, want errNoStatus", err, req.status)
				}
				return
			}
			var se *statusError
			if !errors.As(err, &se) || se.status != tc.status {
				t.Fatalf("got %v, want status %d", err, tc.status)
			}
			if !strings.Contains(se.reason, tc.reason) {
				t.Errorf("reason %q does not mention %q", se.reason, tc.reason)
			}
			if len(req.status) != 1 {
				t.Errorf("status byte missing from a refused request")
			}
		})
	}
}

func TestParseCopiesHeaderBeforeUse(t *testing.T) {
	// The parsed request must not change when the guest rewrites its
	// header afterwards (the checks were made on the copy).
	g := newGuestMem(t)
	hb := g.buf(header(TypeIn, 1))
	req, err := parseRequest(g.mem, []virtio.Buffer{hb}, []virtio.Buffer{g.space(513)}, rwLimits)
	if err != nil {
		t.Fatal(err)
	}
	g.mem.WriteAt(header(TypeOut, 1<<60), int64(hb.Addr))
	if req.kind != TypeIn || req.sector != 1 {
		t.Errorf("request changed with guest memory: %+v", req)
	}
}

func TestTakeLastKeepsCallerSlice(t *testing.T) {
	a, b := []byte{1, 2}, []byte{3, 4, 5}
	bufs := [][]byte{a, b}
	last, rest := takeLast(bufs)
	if len(last) != 1 || last[0] != 5 || len(rest) != 2 || len(rest[1]) != 2 {
		t.Fatalf("takeLast = %v, %v", last, rest)
	}
	if len(bufs[1]) != 3 {
		t.Error("takeLast modified its argument")
	}
}

package vsock

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{
		SrcCID: 3, DstCID: 2, SrcPort: 0x11223344, DstPort: 5000, Len: 7,
		Type: TypeStream, Op: OpRW, Flags: ShutdownBoth, BufAlloc: 1 << 18, FwdCnt: 0xdeadbeef,
	}
	b := h.Bytes()
	if len(b) != HeaderSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), HeaderSize)
	}
	// Spot-check the little-endian layout of virtio 1.2, 5.10.6.
	if b[0] != 3 || b[8] != 2 || !bytes.Equal(b[16:20], []byte{0x44, 0x33, 0x22, 0x11}) ||
		b[24] != 7 || b[28] != 1 || b[30] != 5 || b[32] != 3 || !bytes.Equal(b[40:44], []byte{0xef, 0xbe, 0xad, 0xde}) {
		t.Fatalf("unexpected encoding % x", b)
	}
	got, err := ParseHeader(b)
	if err != nil || got != h {
		t.Fatalf("ParseHeader = %+v, %v; want %+v", got, err, h)
	}
}

func validPacket(op Op, payload []byte) []byte {
	h := Header{SrcCID: 3, DstCID: HostCID, SrcPort: 1, DstPort: 2, Len: uint32(len(payload)), Type: TypeStream, Op: op}
	return append(h.Bytes(), payload...)
}

func TestParsePacketMalformed(t *testing.T) {
	withHeader := func(mod func(*Header), extra int) []byte {
		h := Header{SrcCID: 3, DstCID: HostCID, SrcPort: 1, DstPort: 2, Type: TypeStream, Op: OpRW}
		mod(&h)
		return append(h.Bytes(), make([]byte, extra)...)
	}
	tests := []struct {
		name       string
		pkt        []byte
		want       error
		answerable bool
	}{
		{"empty", nil, ErrShortHeader, false},
		{"short", validPacket(OpRW, nil)[:43], ErrShortHeader, false},
		{"wrong source CID", withHeader(func(h *Header) { h.SrcCID = 4 }, 0), ErrWrongAddress, false},
		{"source CID upper bits", withHeader(func(h *Header) { h.SrcCID = 1<<32 | 3 }, 0), ErrWrongAddress, false},
		{"wrong destination CID", withHeader(func(h *Header) { h.DstCID = 1 }, 0), ErrWrongAddress, false},
		{"seqpacket", withHeader(func(h *Header) { h.Type = 2 }, 0), ErrUnsupportedType, true},
		{"type zero", withHeader(func(h *Header) { h.Type = 0 }, 0), ErrUnsupportedType, true},
		{"op zero", withHeader(func(h *Header) { h.Op = OpInvalid }, 0), ErrUnknownOp, true},
		{"op eight", withHeader(func(h *Header) { h.Op = 8 }, 0), ErrUnknownOp, true},
		{"too large", withHeader(func(h *Header) { h.Len = MaxPayload + 1 }, MaxPayload+1), ErrPayloadTooLarge, true},
		{"huge len", withHeader(func(h *Header) { h.Len = 0xffffffff }, 0), ErrPayloadTooLarge, true},
		{"truncated", withHeader(func(h *Header) { h.Len = 10 }, 9), ErrPayloadTruncated, true},
		{"payload on request", withHeader(func(h *Header) { h.Op = OpRequest; h.Len = 1 }, 1), ErrUnexpectedData, true},
		{"bad RST not answered", withHeader(func(h *Header) { h.Op = OpRST; h.Type = 9 }, 0), ErrUnsupportedType, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, payload, err := ParsePacket(tt.pkt, 3)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if payload != nil {
				t.Fatalf("payload %d bytes returned with an error", len(payload))
			}
			if got := answerable(h, err); got != tt.answerable {
				t.Fatalf("answerable = %v, want %v", got, tt.answerable)
			}
		})
	}
}

func TestParsePacketValid(t *testing.T) {
	pkt := append(validPacket(OpRW, []byte("hello")), "trailing bytes the device ignores"...)
	h, payload, err := ParsePacket(pkt, 3)
	if err != nil {
		t.Fatal(err)
	}
	if h.Op != OpRW || string(payload) != "hello" {
		t.Fatalf("got %v %q", h.Op, payload)
	}
	if _, _, err := ParsePacket(validPacket(OpRW, make([]byte, MaxPayload)), 3); err != nil {
		t.Fatalf("a MaxPayload packet is valid: %v", err)
	}
	if _, _, err := ParsePacket(validPacket(OpRW, nil), 3); err != nil {
		t.Fatalf("an empty RW is valid: %v", err)
	}
}

func TestParseConnectLine(t *testing.T) {
	good := map[string]uint32{"CONNECT 0": 0, "CONNECT 52": 52, "CONNECT 4294967295": 0xffffffff, "CONNECT 1234\r": 1234}
	for line, want := range good {
		if got, err := parseConnectLine(line); err != nil || got != want {
			t.Errorf("parseConnectLine(%q) = %d, %v; want %d", line, got, err, want)
		}
	}
	for _, line := range []string{"", "CONNECT", "CONNECT ", "connect 52", "CONNECT 4294967296", "CONNECT -1", "CONNECT +1", "CONNECT 5 2", "CONNECT  52", "LISTEN 52"} {
		if _, err := parseConnectLine(line); !errors.Is(err, errBadConnect) {
			t.Errorf("parseConnectLine(%q) err = %v, want errBadConnect", line, err)
		}
	}
	// The reader stops at the newline and leaves the stream after it.
	r := bytes.NewReader([]byte("CONNECT 77\nDATA"))
	if port, err := readConnectLine(r); err != nil || port != 77 {
		t.Fatalf("readConnectLine = %d, %v", port, err)
	}
	if rest := r.Len(); rest != 4 {
		t.Fatalf("%d bytes left after the line, want 4", rest)
	}
	if _, err := readConnectLine(bytes.NewReader(bytes.Repeat([]byte("C"), 100))); !errors.Is(err, errBadConnect) {
		t.Fatalf("overlong line: %v", err)
	}
	if _, err := readConnectLine(bytes.NewReader([]byte("CONNECT 5"))); !errors.Is(err, errBadConnect) {
		t.Fatalf("line without newline: %v", err)
	}
}

// FuzzParsePacket checks that no input makes the parser panic, that an
// accepted packet satisfies every rule the device relies on, and that
// headers survive an encode/decode round trip.
func FuzzParsePacket(f *testing.F) {
	f.Add(validPacket(OpRequest, nil))
	f.Add(validPacket(OpRW, []byte("payload")))
	f.Add(validPacket(OpShutdown, nil)[:20])
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, err := ParsePacket(data, 3)
		if err != nil {
			if payload != nil {
				t.Fatal("payload with an error")
			}
			return
		}
		if h.SrcCID != 3 || h.DstCID != HostCID || h.Type != TypeStream || h.Op < OpRequest || h.Op > OpCreditRequest {
			t.Fatalf("accepted bad header %+v", h)
		}
		if int(h.Len) != len(payload) || h.Len > MaxPayload || HeaderSize+len(payload) > len(data) {
			t.Fatalf("payload %d bytes for len %d in %d bytes", len(payload), h.Len, len(data))
		}
		if h.Len != 0 && h.Op != OpRW {
			t.Fatalf("payload accepted on %v", h.Op)
		}
		if again, err := ParseHeader(h.Bytes()); err != nil || again != h {
			t.Fatalf("round trip %+v -> %+v, %v", h, again, err)
		}
	})
}

// FuzzConnectLine checks the host handshake parser on arbitrary input.
func FuzzConnectLine(f *testing.F) {
	f.Add([]byte("CONNECT 52\n"))
	f.Add([]byte("CONNECT 4294967296\n"))
	f.Add([]byte("CONNECT 1\r\nrest"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		port, err := readConnectLine(r)
		if err != nil {
			return
		}
		line := data[:len(data)-r.Len()]
		arg, ok := bytes.CutPrefix(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), []byte("CONNECT "))
		digits := bytes.TrimLeft(arg, "0")
		if !ok || len(arg) == 0 || len(bytes.Trim(arg, "0123456789")) != 0 ||
			(port == 0 && len(digits) != 0) || (port != 0 && string(digits) != itoa(port)) {
			t.Fatalf("accepted %q as port %d", line, port)
		}
	})
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// TestFuzzCorpusPresent keeps the checked-in seed corpora from vanishing.
func TestFuzzCorpusPresent(t *testing.T) {
	for _, target := range []string{"FuzzParsePacket", "FuzzConnectLine"} {
		entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", target))
		if err != nil || len(entries) == 0 {
			t.Errorf("no seed corpus for %s: %v", target, err)
		}
	}
}

package net

import (
	"bytes"
	"errors"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

// txHeaderFault restates the transmit rules of checkTxHeader on their own,
// as a list of conditions rather than a sequence of checks, and returns the
// first one h breaks for a frame of frameLen bytes ("" when none). The fuzz
// targets hold the device to it in both directions: nothing it faults
// reaches a backend, and nothing valid is refused.
func txHeaderFault(h Header, frameLen int, features uint64, mtu uint16) string {
	type fact struct {
		ok   bool
		what string
	}
	csum := h.Flags&HeaderNeedsCsum != 0
	start, off := int(h.CsumStart), int(h.CsumOffset)
	gso, ecn := h.GSOType&^GSOECN, h.GSOType&GSOECN != 0
	facts := []fact{
		{frameLen >= 14 && frameLen <= 65550, "frame length"},
		{h.Flags|HeaderNeedsCsum == HeaderNeedsCsum, "flags"},
		{int(h.HdrLen) <= frameLen, "hdr_len inside the frame"},
		{!csum || features&FeatureCsum != 0, "NEEDS_CSUM negotiated"},
		{!csum || (start >= 14 && start+off+2 <= frameLen), "checksum field inside the frame"},
	}
	if gso == GSONone {
		facts = append(facts,
			fact{!ecn, "ECN needs GSO"},
			fact{mtu == 0 || frameLen <= int(mtu)+18, "frame within the MTU"})
	} else {
		var feature uint64
		var l3, l4, csumOff int
		tcp := true
		switch gso {
		case GSOTCPv4:
			feature, l3, l4, csumOff = FeatureHostTSO4, 20, 20, 16
		case GSOTCPv6:
			feature, l3, l4, csumOff = FeatureHostTSO6, 40, 20, 16
		case GSOUDP:
			feature, l3, l4, csumOff, tcp = FeatureHostUFO, 20, 8, 6, false
		default:
			return "known GSO type"
		}
		headers := start + l4 - 14 // network and transport header of a segment, at least
		facts = append(facts,
			fact{features&feature != 0, "GSO type negotiated"},
			fact{!ecn || (tcp && features&FeatureHostECN != 0), "ECN only on TCP and negotiated"},
			fact{csum, "GSO needs NEEDS_CSUM"},
			fact{start >= 14+l3, "network header before csum_start"},
			fact{off == csumOff, "the transport checksum field"},
			fact{start+l4 <= frameLen, "transport header inside the frame"},
			fact{h.HdrLen == 0 || int(h.HdrLen) >= start+l4, "hdr_len covers the transport header"},
			fact{h.GSOSize >= 48, "segment size at least 48"},
			fact{headers+int(h.GSOSize) <= 65535, "segments fit an IP packet"},
			fact{mtu == 0 || headers+int(h.GSOSize) <= int(mtu)+4, "segments within the MTU"})
	}
	for _, f := range facts {
		if !f.ok {
			return f.what
		}
	}
	return ""
}

// FuzzTxHeader feeds the transmit check arbitrary headers, frame lengths,
// negotiated features and MTUs. It must accept exactly the headers
// txHeaderFault finds nothing wrong with.
func FuzzTxHeader(f *testing.F) {
	f.Add(make([]byte, HeaderSize), 60, uint64(0), uint16(0))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, CsumStart: 34, CsumOffset: 16}, nil), 1514, uint64(FeatureCsum), uint16(1500))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv6 | GSOECN, GSOSize: 1440, CsumStart: 54, CsumOffset: 16}, nil), 65000, uint64(OffloadFeatures), uint16(0))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, HdrLen: 66, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, nil), 30000, uint64(OffloadFeatures), uint16(1500))
	f.Fuzz(func(t *testing.T, raw []byte, frameLen int, features uint64, mtu uint16) {
		h, err := ParseHeader(raw)
		if err != nil {
			if len(raw) >= HeaderSize {
				t.Fatalf("parse of %d bytes failed: %v", len(raw), err)
			}
			return
		}
		var back [HeaderSize]byte
		h.Put(back[:])
		if !bytes.Equal(back[:], raw[:HeaderSize]) {
			t.Fatalf("Put(Parse(%x)) = %x", raw[:HeaderSize], back)
		}
		err = checkTxHeader(h, frameLen, features, mtu)
		fault := txHeaderFault(h, frameLen, features, mtu)
		switch {
		case err == nil && fault != "":
			t.Fatalf("accepted %+v for %d bytes, features %#x, MTU %d: violates %q", h, frameLen, features, mtu, fault)
		case err != nil && fault == "":
			t.Fatalf("refused valid %+v for %d bytes, features %#x, MTU %d: %v", h, frameLen, features, mtu, err)
		case err != nil && !errors.Is(err, errBadHeader):
			t.Fatalf("refusal %v does not wrap errBadHeader", err)
		}
	})
}

// FuzzTransmit sends one packet (raw header, then a frame of frameLen
// bytes, cut into buffers at the offsets in cuts) through the worker's
// transmit path on a real queue, with the given features and MTU. The
// backend must get the packet exactly, and only if its header is valid;
// otherwise it is dropped and counted.
func FuzzTransmit(f *testing.F) {
	f.Add(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, nil)[:HeaderSize], uint32(20000), []byte{5, 40}, uint64(OffloadFeatures), uint16(0))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, GSOSize: 1, CsumStart: 34, CsumOffset: 16}, nil)[:HeaderSize], uint32(20000), []byte{}, uint64(OffloadFeatures), uint16(0))
	f.Add(make([]byte, HeaderSize), uint32(1600), []byte{12}, uint64(FeatureMTU), uint16(1500))

	mem, err := memory.New(4 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })

	f.Fuzz(func(t *testing.T, raw []byte, frameLen uint32, cuts []byte, features uint64, mtu uint16) {
		if len(raw) < HeaderSize {
			return
		}
		frameLen %= MaxFrameLen + 2
		p := append(append([]byte(nil), raw[:HeaderSize]...), ethFrame(max(int(frameLen), ethHeaderLen), byte(frameLen))...)
		var pieces [][]byte
		rest := p
		for _, c := range cuts {
			if n := int(c); n > 0 && n < len(rest) && len(pieces) < 8 {
				pieces, rest = append(pieces, rest[:n]), rest[n:]
			}
		}
		pieces = append(pieces, rest)

		dq := virtiotest.NewDriverQueue(t, mem, virtiotest.DefaultQueueBase, 16)
		dq.AddChain(pieces, nil)
		q, err := virtio.NewQueue(mem, dq.State())
		if err != nil {
			t.Fatal(err)
		}
		fb := newFakeBackend(OffloadFeatures)
		var s stats
		w := newWorker(virtio.Env{Mem: mem, Features: features, Queues: []*virtio.Queue{q, q}, Interrupt: virtiotest.NewInterrupter()}, fb, &s)
		if features&FeatureMTU != 0 {
			w.mtu = mtu
		}
		w.processTx()

		h, _ := ParseHeader(p)
		fault := txHeaderFault(h, len(p)-HeaderSize, features, w.mtu)
		sent, st := fb.sentFrames(), s.snapshot()
		switch {
		case len(sent) > 1:
			t.Fatalf("one packet reached the backend %d times", len(sent))
		case len(sent) == 1 && fault != "":
			t.Fatalf("header %+v (%d-byte frame, features %#x, MTU %d) reached the backend: violates %q", h, len(p)-HeaderSize, features, w.mtu, fault)
		case len(sent) == 1:
			mustEqual(t, "transmitted packet", sent[0], p)
		case fault == "":
			t.Fatalf("valid header %+v (%d-byte frame) dropped: stats %+v", h, len(p)-HeaderSize, st)
		case st.TxDropped != 1:
			t.Fatalf("refused packet not counted: stats %+v", st)
		}
		if u := dq.Used(); len(u) != 1 || u[0].Len != 0 {
			t.Fatalf("used entries %+v, want one of length 0", u)
		}
	})
}

// FuzzRxHeader feeds the receive check what a backend might deliver. What
// it passes on must be something the driver agreed to receive.
func FuzzRxHeader(f *testing.F) {
	f.Add(make([]byte, HeaderSize), 60, uint64(0))
	f.Add(packet(Header{Flags: HeaderDataValid}, nil), 60, uint64(0))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, nil), 30000, uint64(OffloadFeatures))
	f.Fuzz(func(t *testing.T, raw []byte, frameLen int, features uint64) {
		h, err := ParseHeader(raw)
		if err != nil {
			return
		}
		out, err := fixRxHeader(h, frameLen, features)
		if err != nil {
			return
		}
		if frameLen < ethHeaderLen || frameLen > MaxFrameLen {
			t.Fatalf("passed frame length %d", frameLen)
		}
		guestCsum := features&FeatureGuestCsum != 0
		if out.Flags&^(HeaderNeedsCsum|HeaderDataValid) != 0 || (!guestCsum && out.Flags != 0) {
			t.Fatalf("passed flags %#x to a driver with features %#x", out.Flags, features)
		}
		if out.Flags&HeaderNeedsCsum != 0 && int(out.CsumStart)+int(out.CsumOffset)+2 > frameLen {
			t.Fatalf("passed checksum %+v for %d bytes", out, frameLen)
		}
		gso := out.GSOType &^ GSOECN
		need := map[uint8]uint64{GSONone: 0, GSOTCPv4: FeatureGuestTSO4, GSOTCPv6: FeatureGuestTSO6, GSOUDP: FeatureGuestUFO}
		want, known := need[gso]
		if !known || features&want != want || (out.GSOType&GSOECN != 0 && features&FeatureGuestECN == 0) || (gso != GSONone && out.GSOSize == 0) {
			t.Fatalf("passed GSO type %#x with features %#x", out.GSOType, features)
		}
	})
}

// FuzzReceive delivers one frame of frameLen bytes into receive chains whose
// writable lengths come from sizes (two bytes each), with or without
// MRG_RXBUF, through the worker's receive path on real queues. The frame
// must arrive intact with num_buffers matching the used entries, or be
// dropped, or wait for more buffers; nothing else.
func FuzzReceive(f *testing.F) {
	f.Add([]byte{0x00, 0x04, 0x00, 0x04, 0x00, 0x04}, uint32(3000), true)
	f.Add([]byte{0x06, 0x00, 0xee, 0x05}, uint32(1000), false)
	f.Add([]byte{0x0b, 0x00, 0x0c, 0x00, 0x00, 0x01}, uint32(100), true)
	f.Add([]byte{0x0c, 0x00}, uint32(65550), true)

	mem, err := memory.New(4 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })

	f.Fuzz(func(t *testing.T, sizes []byte, frameLen uint32, mrg bool) {
		frameLen %= MaxFrameLen + 2
		const queueSize = 64
		dq := virtiotest.NewDriverQueue(t, mem, virtiotest.DefaultQueueBase, queueSize)
		var total uint64
		for i := 0; i+1 < len(sizes) && i/2 < queueSize && total < 2*MaxPacketLen; i += 2 {
			n := uint32(sizes[i]) | uint32(sizes[i+1])<<8
			if n == 0 {
				n = 1
			}
			dq.AddChain(nil, []uint32{n})
			total += uint64(n)
		}
		st := dq.State()
		q, err := virtio.NewQueue(mem, st)
		if err != nil {
			t.Fatal(err)
		}
		features := uint64(OffloadFeatures)
		if mrg {
			features |= FeatureMrgRxBuf
		}
		fb := newFakeBackend(OffloadFeatures)
		frame := ethFrame(max(int(frameLen), ethHeaderLen), byte(frameLen))
		want := packet(Header{}, frame)
		fb.deliver(want)
		var s stats
		w := newWorker(virtio.Env{Mem: mem, Features: features, Queues: []*virtio.Queue{q, q}, Interrupt: virtiotest.NewInterrupter()}, fb, &s)
		w.processRx()

		used := dq.Used()
		var delivered []virtiotest.UsedElem
		for _, u := range used {
			if u.Len != 0 {
				delivered = append(delivered, u)
			}
		}
		got := s.snapshot()
		switch {
		case len(delivered) > 0:
			h, _ := ParseHeader(concat(delivered))
			if int(h.NumBuffers) != len(delivered) || got.RxFrames != 1 {
				t.Fatalf("num_buffers %d for %d used entries (stats %+v)", h.NumBuffers, len(delivered), got)
			}
			if !mrg && len(delivered) != 1 {
				t.Fatalf("frame spread over %d chains without MRG_RXBUF", len(delivered))
			}
			w := append([]byte(nil), want...)
			Header{NumBuffers: h.NumBuffers}.Put(w)
			mustEqual(t, "received packet", concat(delivered), w)
		case got.RxDropped == 1:
			if mrg && len(frame) <= MaxFrameLen {
				t.Fatalf("dropped a %d-byte frame with MRG_RXBUF", len(frame))
			}
			if w.held == nil {
				t.Fatal("dropped a frame without keeping its chain")
			}
		case w.pending != nil || fb.pending() == 1:
			// Waiting for buffers (none, or not enough for the tail).
		default:
			t.Fatalf("frame of %d bytes vanished: stats %+v, used %d", len(frame), got, len(used))
		}
	})
}

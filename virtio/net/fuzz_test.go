package net

import (
	"bytes"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

// FuzzTxHeader feeds the transmit check arbitrary headers, frame lengths
// and negotiated features. What it accepts must be a header the spec lets
// a driver send with those features.
func FuzzTxHeader(f *testing.F) {
	f.Add(make([]byte, HeaderSize), 60, uint64(0))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, CsumStart: 34, CsumOffset: 16}, nil), 1514, uint64(FeatureCsum))
	f.Add(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv6 | GSOECN, GSOSize: 1440, CsumStart: 54, CsumOffset: 16}, nil), 65000, uint64(OffloadFeatures))
	f.Fuzz(func(t *testing.T, raw []byte, frameLen int, features uint64) {
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
		if checkTxHeader(h, frameLen, features) != nil {
			return
		}
		if frameLen < ethHeaderLen || frameLen > MaxFrameLen {
			t.Fatalf("accepted frame length %d", frameLen)
		}
		if h.Flags&^HeaderNeedsCsum != 0 {
			t.Fatalf("accepted flags %#x", h.Flags)
		}
		if h.Flags&HeaderNeedsCsum != 0 && (features&FeatureCsum == 0 || int(h.CsumStart)+int(h.CsumOffset)+2 > frameLen) {
			t.Fatalf("accepted checksum %+v for %d bytes, features %#x", h, frameLen, features)
		}
		gso := h.GSOType &^ GSOECN
		if gso != GSONone && (h.Flags&HeaderNeedsCsum == 0 || h.GSOSize == 0) {
			t.Fatalf("accepted GSO header %+v", h)
		}
		need := map[uint8]uint64{GSONone: 0, GSOTCPv4: FeatureHostTSO4, GSOTCPv6: FeatureHostTSO6, GSOUDP: FeatureHostUFO}
		want, known := need[gso]
		if !known || features&want != want || (h.GSOType&GSOECN != 0 && (gso == GSONone || features&FeatureHostECN == 0)) {
			t.Fatalf("accepted GSO type %#x with features %#x", h.GSOType, features)
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

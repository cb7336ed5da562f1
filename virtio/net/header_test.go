package net

import (
	"errors"
	"testing"
)

// TestCheckTxHeaderRules takes each transmit rule of checkTxHeader in turn:
// headers a Linux guest sends pass, and for every rule one header that
// breaks only that rule is refused.
func TestCheckTxHeaderRules(t *testing.T) {
	const all = OffloadFeatures | FeatureHostUFO
	tso4 := Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, HdrLen: 66, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}
	tso6 := Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv6, HdrLen: 86, GSOSize: 1428, CsumStart: 54, CsumOffset: 16}
	ufo := Header{Flags: HeaderNeedsCsum, GSOType: GSOUDP, HdrLen: 42, GSOSize: 1472, CsumStart: 34, CsumOffset: 6}
	csum := Header{Flags: HeaderNeedsCsum, CsumStart: 34, CsumOffset: 16}
	with := func(h Header, mod func(*Header)) Header { mod(&h); return h }

	type tc struct {
		name     string
		h        Header
		frameLen int
		features uint64
		mtu      uint16
	}
	valid := []tc{
		{"plain frame", Header{}, 60, 0, 0},
		{"plain frame at the MTU", Header{}, 1514, 0, 1500},
		{"VLAN-tagged frame at the MTU", Header{}, 1518, 0, 1500},
		{"jumbo frame without an MTU", Header{}, 9014, 0, 0},
		{"partial checksum", csum, 1514, FeatureCsum, 0},
		{"hdr_len hint on a plain frame", Header{HdrLen: 54}, 60, 0, 0},
		{"TSOv4", tso4, 30000, all, 1500},
		{"TSOv4 with ECN", with(tso4, func(h *Header) { h.GSOType |= GSOECN }), 30000, all, 0},
		{"TSOv4 without hdr_len", with(tso4, func(h *Header) { h.HdrLen = 0 }), 30000, all, 0},
		{"TSOv4 with hdr_len covering payload", with(tso4, func(h *Header) { h.HdrLen = 2000 }), 30000, all, 0},
		{"TSOv4 at the smallest segment size", with(tso4, func(h *Header) { h.GSOSize = minGSOSize }), 30000, all, 0},
		{"TSOv4 at the largest segment size", with(tso4, func(h *Header) { h.GSOSize = 65535 - 40 }), 30000, all, 0},
		{"TSOv4 segments at the MTU", with(tso4, func(h *Header) { h.GSOSize = 1460 }), 30000, all, 1500},
		{"VLAN-tagged TSOv4 at the MTU", with(tso4, func(h *Header) { h.CsumStart, h.HdrLen, h.GSOSize = 38, 70, 1460 }), 30000, all, 1500},
		{"TSOv6", tso6, 65000, all, 1500},
		{"UFO", ufo, 3000, all, 0},
		{"super-frame smaller than a segment", tso4, 100, all, 0},
	}
	for _, c := range valid {
		if err := checkTxHeader(c.h, c.frameLen, c.features, c.mtu); err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
	}

	invalid := []tc{
		{"runt frame", Header{}, 13, 0, 0},
		{"frame over MaxFrameLen", Header{}, MaxFrameLen + 1, 0, 0},
		{"DATA_VALID on transmit", Header{Flags: HeaderDataValid}, 60, all, 0},
		{"unknown flag", Header{Flags: 0x80}, 60, all, 0},
		{"hdr_len past the frame", Header{HdrLen: 61}, 60, 0, 0},
		{"hdr_len past a super-frame", with(tso4, func(h *Header) { h.HdrLen = 101 }), 100, all, 0},
		{"NEEDS_CSUM not negotiated", csum, 1514, all &^ FeatureCsum, 0},
		{"checksum inside the Ethernet header", with(csum, func(h *Header) { h.CsumStart, h.CsumOffset = 10, 0 }), 1514, FeatureCsum, 0},
		{"checksum field past the frame", with(csum, func(h *Header) { h.CsumOffset = 1514 - 34 - 1 }), 1514, FeatureCsum, 0},
		{"frame over the MTU", Header{}, 1519, 0, 1500},
		{"ECN without GSO", Header{GSOType: GSOECN}, 60, all, 0},
		{"GSO type 2", with(tso4, func(h *Header) { h.GSOType = 2 }), 30000, all, 0},
		{"GSO type 5 (UDP_L4, not offered)", with(tso4, func(h *Header) { h.GSOType = 5 }), 30000, all, 0},
		{"GSO type 0x7f", with(tso4, func(h *Header) { h.GSOType = 0x7f }), 30000, all, 0},
		{"TSOv4 not negotiated", tso4, 30000, all &^ FeatureHostTSO4, 0},
		{"TSOv6 not negotiated", tso6, 30000, all &^ FeatureHostTSO6, 0},
		{"ECN not negotiated", with(tso4, func(h *Header) { h.GSOType |= GSOECN }), 30000, all &^ FeatureHostECN, 0},
		{"ECN on UDP", with(ufo, func(h *Header) { h.GSOType |= GSOECN }), 3000, all, 0},
		{"GSO without NEEDS_CSUM", with(tso4, func(h *Header) { h.Flags = 0 }), 30000, all, 0},
		{"TSOv4 transport header inside the IPv4 header", with(tso4, func(h *Header) { h.CsumStart = 33 }), 30000, all, 0},
		{"TSOv6 transport header inside the IPv6 header", with(tso6, func(h *Header) { h.CsumStart = 34 }), 30000, all, 0},
		{"TSO checksum not TCP's", with(tso4, func(h *Header) { h.CsumOffset = 6 }), 30000, all, 0},
		{"UFO checksum not UDP's", with(ufo, func(h *Header) { h.CsumOffset = 16 }), 3000, all, 0},
		{"TCP header past the frame", with(tso4, func(h *Header) { h.HdrLen = 0 }), 53, all, 0},
		{"hdr_len short of the TCP header", with(tso4, func(h *Header) { h.HdrLen = 53 }), 30000, all, 0},
		{"zero segment size", with(tso4, func(h *Header) { h.GSOSize = 0 }), 30000, all, 0},
		{"one-byte segments", with(tso4, func(h *Header) { h.GSOSize = 1 }), 30000, all, 0},
		{"segments just under the minimum", with(tso4, func(h *Header) { h.GSOSize = minGSOSize - 1 }), 30000, all, 0},
		{"segments over an IP packet", with(tso4, func(h *Header) { h.GSOSize = 65535 - 40 + 1 }), 30000, all, 0},
		{"segments over the MTU", with(tso4, func(h *Header) { h.GSOSize = 1460 + vlanTagLen + 1 }), 30000, all, 1500},
	}
	for _, c := range invalid {
		err := checkTxHeader(c.h, c.frameLen, c.features, c.mtu)
		if !errors.Is(err, errBadHeader) {
			t.Errorf("%s: %+v for %d bytes accepted (err %v)", c.name, c.h, c.frameLen, err)
		}
	}
}

// TestTransmitHoldsToTheMTU: with VIRTIO_NET_F_MTU the driver was told the
// MTU, so frames and segments beyond it are refused before the backend.
func TestTransmitHoldsToTheMTU(t *testing.T) {
	r := newRig(t, Options{MTU: 1500}, OffloadFeatures, 0)
	if r.drv.Features&FeatureMTU == 0 {
		t.Fatal("MTU not negotiated")
	}
	atMTU := packet(Header{}, ethFrame(1514, 1))
	tso := packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1460, CsumStart: 34, CsumOffset: 16}, ethFrame(20000, 2))
	overMTU := packet(Header{}, ethFrame(1519, 3))
	bigSegments := packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 8960, CsumStart: 34, CsumOffset: 16}, ethFrame(20000, 4))
	for _, p := range [][]byte{overMTU, atMTU, bigSegments, tso} {
		r.tx.SetUsedEvent(r.tx.UsedIdx())
		r.send(p)
		r.tx.WaitUsed(1, waitTimeout)
	}
	got := r.backend.waitSent(2, waitTimeout)
	if len(got) != 2 {
		t.Fatalf("backend got %d frames, want 2", len(got))
	}
	mustEqual(t, "frame at the MTU", got[0], atMTU)
	mustEqual(t, "super-frame with segments at the MTU", got[1], tso)
	if st := r.dev.Stats(); st.TxDropped != 2 || st.TxFrames != 2 {
		t.Errorf("stats %+v, want 2 sent and 2 dropped", st)
	}
}

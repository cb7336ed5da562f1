package net

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Header flags and GSO types of struct virtio_net_hdr (virtio 1.2, section
// 5.1.6).
const (
	HeaderNeedsCsum = 1 // csum_start/csum_offset describe a checksum still to compute
	HeaderDataValid = 2 // (receive only) the checksum was verified
	HeaderRSCInfo   = 4 // (receive only) coalescing info, needs GUEST_RSC: never used

	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3
	GSOTCPv6 = 4
	GSOECN   = 0x80 // combined with TCPv4/TCPv6: the super-frame carries CWR
)

// ethHeaderLen is the shortest frame worth moving: an Ethernet header.
const ethHeaderLen = 14

// Header is struct virtio_net_hdr as it precedes every frame.
type Header struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // length of the headers to copy for each segment (advisory)
	GSOSize    uint16 // segment payload size (MSS) of a super-frame
	CsumStart  uint16 // where checksumming starts, from the Ethernet header
	CsumOffset uint16 // where to store the checksum, from CsumStart
	NumBuffers uint16 // receive chains the frame spans (receive only)
}

// ParseHeader decodes the first HeaderSize bytes of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("virtio-net header needs %d bytes, have %d", HeaderSize, len(b))
	}
	le := binary.LittleEndian
	return Header{
		Flags:      b[0],
		GSOType:    b[1],
		HdrLen:     le.Uint16(b[2:]),
		GSOSize:    le.Uint16(b[4:]),
		CsumStart:  le.Uint16(b[6:]),
		CsumOffset: le.Uint16(b[8:]),
		NumBuffers: le.Uint16(b[10:]),
	}, nil
}

// Put encodes h into the first HeaderSize bytes of b (which must hold them).
func (h Header) Put(b []byte) {
	le := binary.LittleEndian
	b[0], b[1] = h.Flags, h.GSOType
	le.PutUint16(b[2:], h.HdrLen)
	le.PutUint16(b[4:], h.GSOSize)
	le.PutUint16(b[6:], h.CsumStart)
	le.PutUint16(b[8:], h.CsumOffset)
	le.PutUint16(b[10:], h.NumBuffers)
}

// errBadHeader marks a header the device refuses; the frame is dropped.
var errBadHeader = errors.New("bad virtio-net header")

// Limits on transmitted headers beyond what the feature bits say. They come
// from what the fields mean, so a header that passes describes a frame a
// real network stack could have produced, and one that fails cannot make a
// backend (the TAP's kernel, or a userspace stack) do work the frame does
// not justify.
const (
	// vlanTagLen is one 802.1Q tag. An MTU does not count it, so a frame
	// may be this much longer than the MTU and its Ethernet header.
	vlanTagLen = 4
	// maxIPPacket is the largest IP packet the 16-bit length fields allow:
	// every segment cut from a super-frame must fit it.
	maxIPPacket = 65535
	// minGSOSize is the smallest segment payload accepted for a
	// super-frame. It is Linux's TCP_MIN_SND_MSS: no Linux sender cuts
	// smaller segments, even for a peer advertising a tinier MSS, because
	// a tiny MSS makes a 64 KiB super-frame into thousands of segments
	// (the CVE-2019-11479 lesson). 48 bytes bounds one super-frame to at
	// most 1,365 segments (65,496 payload bytes behind minimal headers).
	minGSOSize = 48
)

// gsoRule is what a super-frame of one GSO type must look like: its
// network header is at least minL3 bytes (so the transport header starts at
// ethHeaderLen+minL3 or later), its transport header at least minL4 bytes,
// and the checksum to complete is the transport protocol's own, at
// csumOffset into that header.
type gsoRule struct {
	feature    uint64 // the HOST_* feature that allows it
	minL3      int
	minL4      int
	csumOffset uint16
	ecn        bool // may carry GSOECN (a TCP flag)
}

var gsoRules = map[uint8]gsoRule{
	GSOTCPv4: {feature: FeatureHostTSO4, minL3: 20, minL4: 20, csumOffset: 16, ecn: true},
	GSOTCPv6: {feature: FeatureHostTSO6, minL3: 40, minL4: 20, csumOffset: 16, ecn: true},
	GSOUDP:   {feature: FeatureHostUFO, minL3: 20, minL4: 8, csumOffset: 6},
}

// checkTxHeader validates the header of a frame the driver sends, of
// frameLen bytes after the header, against the negotiated features (virtio
// 1.2, section 5.1.6.2) and mtu, the MTU the driver was given with
// VIRTIO_NET_F_MTU (0 when it was not). The TAP's kernel checks some of this
// again; checking here keeps a guest's mistakes and attacks from reaching
// any backend, and lets a userspace backend trust what it gets:
//
//   - the frame holds at least an Ethernet header and at most MaxFrameLen
//     bytes, and, without GSO, at most mtu plus its Ethernet header (and
//     one VLAN tag);
//   - only NEEDS_CSUM is set, and only with VIRTIO_NET_F_CSUM; the checksum
//     starts after the Ethernet header and its 2-byte field lies inside the
//     frame;
//   - hdr_len (a hint to the device without GUEST_HDRLEN) lies inside the
//     frame;
//   - a super-frame has a known GSO type whose HOST_* feature was
//     negotiated (ECN only for TCP and with HOST_ECN), a checksum to
//     complete that is its transport protocol's (csum_start after a
//     minimal network header, csum_offset the protocol's checksum field, a
//     minimal transport header inside the frame, hdr_len, when given, not
//     short of it), and a segment size of at least minGSOSize whose
//     segments fit an IP packet and, with an MTU, the MTU.
func checkTxHeader(h Header, frameLen int, features uint64, mtu uint16) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errBadHeader, fmt.Sprintf(format, args...))
	}
	if frameLen < ethHeaderLen {
		return bad("frame of %d bytes is shorter than an Ethernet header", frameLen)
	}
	if frameLen > MaxFrameLen {
		return bad("frame of %d bytes exceeds %d", frameLen, MaxFrameLen)
	}
	if h.Flags&^HeaderNeedsCsum != 0 {
		return bad("flags %#x: only NEEDS_CSUM is valid on transmit", h.Flags)
	}
	if int(h.HdrLen) > frameLen {
		return bad("hdr_len %d exceeds the %d-byte frame", h.HdrLen, frameLen)
	}
	csum := h.Flags&HeaderNeedsCsum != 0
	if csum {
		if features&FeatureCsum == 0 {
			return bad("NEEDS_CSUM without VIRTIO_NET_F_CSUM")
		}
		if h.CsumStart < ethHeaderLen {
			return bad("checksum starts at %d, inside the Ethernet header", h.CsumStart)
		}
		if err := checkCsumRange(h, frameLen); err != nil {
			return bad("%v", err)
		}
	}
	gso, ecn := h.GSOType&^GSOECN, h.GSOType&GSOECN != 0
	if gso == GSONone {
		if ecn {
			return bad("ECN without a GSO type")
		}
		if mtu != 0 && frameLen > int(mtu)+ethHeaderLen+vlanTagLen {
			return bad("frame of %d bytes exceeds the MTU of %d", frameLen, mtu)
		}
		return nil
	}
	rule, known := gsoRules[gso]
	if !known {
		return bad("unknown GSO type %#x", h.GSOType)
	}
	need := rule.feature
	if ecn {
		if !rule.ecn {
			return bad("ECN on GSO type %#x, which is not TCP", h.GSOType)
		}
		need |= FeatureHostECN
	}
	if features&need != need {
		return bad("GSO type %#x not negotiated", h.GSOType)
	}
	if !csum {
		return bad("GSO type %#x without NEEDS_CSUM", h.GSOType)
	}
	if int(h.CsumStart) < ethHeaderLen+rule.minL3 {
		return bad("GSO type %#x: transport header at %d leaves no room for a %d-byte network header", h.GSOType, h.CsumStart, rule.minL3)
	}
	if h.CsumOffset != rule.csumOffset {
		return bad("GSO type %#x: checksum at offset %d of the transport header, want %d", h.GSOType, h.CsumOffset, rule.csumOffset)
	}
	l4End := int(h.CsumStart) + rule.minL4 // the least the headers can end at
	if l4End > frameLen {
		return bad("GSO type %#x: %d-byte transport header at %d lies past the %d-byte frame", h.GSOType, rule.minL4, h.CsumStart, frameLen)
	}
	if h.HdrLen != 0 && int(h.HdrLen) < l4End {
		return bad("GSO type %#x: hdr_len %d ends before the transport header (%d)", h.GSOType, h.HdrLen, l4End)
	}
	if h.GSOSize < minGSOSize {
		return bad("GSO type %#x with a segment size of %d, below %d", h.GSOType, h.GSOSize, minGSOSize)
	}
	// What each segment carries besides its payload, counted from the
	// network header on; csum_start may include a VLAN tag, hence the
	// allowance below.
	segHeaders := l4End - ethHeaderLen
	if int(h.GSOSize) > maxIPPacket-segHeaders {
		return bad("GSO type %#x: segments of %d bytes behind %d bytes of headers exceed an IP packet", h.GSOType, h.GSOSize, segHeaders)
	}
	if mtu != 0 && segHeaders+int(h.GSOSize) > int(mtu)+vlanTagLen {
		return bad("GSO type %#x: segments of %d bytes behind %d bytes of headers exceed the MTU of %d", h.GSOType, h.GSOSize, segHeaders, mtu)
	}
	return nil
}

// fixRxHeader checks the header of a frame the backend delivers, of
// frameLen bytes after the header, against what the driver agreed to
// receive, and returns the header the driver gets: DATA_VALID is cleared
// for a driver without GUEST_CSUM (the spec wants flags zero then), and
// num_buffers is left for the caller. A partial checksum or a super-frame
// the driver did not accept fails: the driver could not handle the frame.
func fixRxHeader(h Header, frameLen int, features uint64) (Header, error) {
	bad := func(format string, args ...any) (Header, error) {
		return Header{}, fmt.Errorf("%w: %s", errBadHeader, fmt.Sprintf(format, args...))
	}
	if frameLen < ethHeaderLen {
		return bad("frame of %d bytes is shorter than an Ethernet header", frameLen)
	}
	if frameLen > MaxFrameLen {
		return bad("frame of %d bytes exceeds %d", frameLen, MaxFrameLen)
	}
	guestCsum := features&FeatureGuestCsum != 0
	h.Flags &= HeaderNeedsCsum | HeaderDataValid
	if !guestCsum {
		h.Flags &^= HeaderDataValid
	}
	if h.Flags&HeaderNeedsCsum != 0 {
		if !guestCsum {
			return bad("partially checksummed frame for a driver without GUEST_CSUM")
		}
		if err := checkCsumRange(h, frameLen); err != nil {
			return bad("%v", err)
		}
	}
	gso, ecn := h.GSOType&^GSOECN, h.GSOType&GSOECN != 0
	var need uint64
	switch gso {
	case GSONone:
		if ecn {
			return bad("ECN without a GSO type")
		}
		return h, nil
	case GSOTCPv4:
		need = FeatureGuestTSO4
	case GSOTCPv6:
		need = FeatureGuestTSO6
	case GSOUDP:
		need = FeatureGuestUFO
	default:
		return bad("unknown GSO type %#x", h.GSOType)
	}
	if ecn {
		need |= FeatureGuestECN
	}
	if features&need != need {
		return bad("GSO type %#x not accepted by the driver", h.GSOType)
	}
	if h.GSOSize == 0 {
		return bad("GSO type %#x with a zero segment size", h.GSOType)
	}
	return h, nil
}

// checkCsumRange checks that the 2-byte checksum field lies in the frame.
func checkCsumRange(h Header, frameLen int) error {
	if end := int(h.CsumStart) + int(h.CsumOffset) + 2; end > frameLen {
		return fmt.Errorf("checksum at %d+%d lies past the %d-byte frame", h.CsumStart, h.CsumOffset, frameLen)
	}
	return nil
}

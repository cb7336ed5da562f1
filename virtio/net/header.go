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

// checkTxHeader validates the header of a frame the driver sends, of
// frameLen bytes after the header, against the negotiated features (virtio
// 1.2, section 5.1.6.2): only NEEDS_CSUM may be set, a checksum must lie
// inside the frame, and a super-frame needs the matching HOST_* feature, a
// checksum to complete and a segment size. The TAP's kernel checks again;
// checking here keeps a guest's mistakes from reaching any backend and lets
// a userspace backend trust what it gets.
func checkTxHeader(h Header, frameLen int, features uint64) error {
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
	if h.Flags&HeaderNeedsCsum != 0 {
		if features&FeatureCsum == 0 {
			return bad("NEEDS_CSUM without VIRTIO_NET_F_CSUM")
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
		return nil
	case GSOTCPv4:
		need = FeatureHostTSO4
	case GSOTCPv6:
		need = FeatureHostTSO6
	case GSOUDP:
		need = FeatureHostUFO
	default:
		return bad("unknown GSO type %#x", h.GSOType)
	}
	if ecn {
		need |= FeatureHostECN
	}
	if features&need != need {
		return bad("GSO type %#x not negotiated", h.GSOType)
	}
	if h.Flags&HeaderNeedsCsum == 0 {
		return bad("GSO type %#x without NEEDS_CSUM", h.GSOType)
	}
	if h.GSOSize == 0 {
		return bad("GSO type %#x with a zero segment size", h.GSOType)
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

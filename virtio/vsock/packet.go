package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of struct virtio_vsock_hdr: every packet on the rx
// and tx queues starts with it, followed by Len bytes of payload.
const HeaderSize = 44

// HostCID is the context ID of the host, the only peer a guest can reach
// through this device.
const HostCID = 2

// MaxPayload bounds the payload of one packet the guest sends. Linux never
// sends more than 64 KiB in one packet; anything larger is a hostile or
// broken driver and is refused before the device copies a byte of it.
const MaxPayload = 64 << 10

// Op is a packet's operation (virtio 1.2, 5.10.6).
type Op uint16

// Packet operations.
const (
	OpInvalid       Op = 0
	OpRequest       Op = 1 // open a connection
	OpResponse      Op = 2 // accept it
	OpRST           Op = 3 // refuse or abort a connection
	OpShutdown      Op = 4 // stop sending and/or receiving (Flags)
	OpRW            Op = 5 // stream data
	OpCreditUpdate  Op = 6 // here is my buf_alloc/fwd_cnt
	OpCreditRequest Op = 7 // please send me yours
)

func (o Op) String() string {
	switch o {
	case OpRequest:
		return "REQUEST"
	case OpResponse:
		return "RESPONSE"
	case OpRST:
		return "RST"
	case OpShutdown:
		return "SHUTDOWN"
	case OpRW:
		return "RW"
	case OpCreditUpdate:
		return "CREDIT_UPDATE"
	case OpCreditRequest:
		return "CREDIT_REQUEST"
	}
	return fmt.Sprintf("op(%d)", uint16(o))
}

// TypeStream is the only socket type the device offers
// (VIRTIO_VSOCK_F_STREAM); SEQPACKET is not negotiated.
const TypeStream uint16 = 1

// Shutdown flags of an OpShutdown packet: the sender will receive no more
// (ShutdownRcv) and/or send no more (ShutdownSend).
const (
	ShutdownRcv  uint32 = 1
	ShutdownSend uint32 = 2
	ShutdownBoth        = ShutdownRcv | ShutdownSend
)

// Header is struct virtio_vsock_hdr, decoded. All fields are little endian
// on the wire.
type Header struct {
	SrcCID   uint64
	DstCID   uint64
	SrcPort  uint32
	DstPort  uint32
	Len      uint32 // payload bytes that follow the header
	Type     uint16
	Op       Op
	Flags    uint32
	BufAlloc uint32 // sender's receive buffer for this connection
	FwdCnt   uint32 // bytes the sender has consumed from that buffer, ever (wraps)
}

// Errors from ParseHeader and Header.Validate. They say what the device does
// with the packet: ErrShortHeader and ErrWrongAddress drop it (there is no
// peer to answer), the others are answered with RST.
var (
	ErrShortHeader      = errors.New("vsock: packet shorter than its header")
	ErrWrongAddress     = errors.New("vsock: packet not from the guest CID to the host CID")
	ErrUnsupportedType  = errors.New("vsock: unsupported socket type")
	ErrUnknownOp        = errors.New("vsock: unknown packet operation")
	ErrPayloadTooLarge  = errors.New("vsock: packet payload too large")
	ErrPayloadTruncated = errors.New("vsock: packet payload longer than its buffers")
	ErrUnexpectedData   = errors.New("vsock: payload on a packet that carries none")
)

// ParseHeader decodes the first HeaderSize bytes of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrShortHeader, len(b))
	}
	le := binary.LittleEndian
	return Header{
		SrcCID:   le.Uint64(b[0:]),
		DstCID:   le.Uint64(b[8:]),
		SrcPort:  le.Uint32(b[16:]),
		DstPort:  le.Uint32(b[20:]),
		Len:      le.Uint32(b[24:]),
		Type:     le.Uint16(b[28:]),
		Op:       Op(le.Uint16(b[30:])),
		Flags:    le.Uint32(b[32:]),
		BufAlloc: le.Uint32(b[36:]),
		FwdCnt:   le.Uint32(b[40:]),
	}, nil
}

// Encode writes h into the first HeaderSize bytes of b, which must be at
// least that long.
func (h Header) Encode(b []byte) {
	le := binary.LittleEndian
	_ = b[HeaderSize-1]
	le.PutUint64(b[0:], h.SrcCID)
	le.PutUint64(b[8:], h.DstCID)
	le.PutUint32(b[16:], h.SrcPort)
	le.PutUint32(b[20:], h.DstPort)
	le.PutUint32(b[24:], h.Len)
	le.PutUint16(b[28:], h.Type)
	le.PutUint16(b[30:], uint16(h.Op))
	le.PutUint32(b[32:], h.Flags)
	le.PutUint32(b[36:], h.BufAlloc)
	le.PutUint32(b[40:], h.FwdCnt)
}

// Bytes returns h encoded.
func (h Header) Bytes() []byte {
	b := make([]byte, HeaderSize)
	h.Encode(b)
	return b
}

// Validate checks a header the guest sent: its addresses, type, operation
// and payload length (against MaxPayload and against payloadRoom, the
// readable bytes that follow the header in the descriptor chain). Only RW
// packets may carry payload.
func (h Header) Validate(guestCID uint64, payloadRoom uint64) error {
	if h.SrcCID != guestCID || h.DstCID != HostCID {
		return fmt.Errorf("%w: %d -> %d", ErrWrongAddress, h.SrcCID, h.DstCID)
	}
	if h.Type != TypeStream {
		return fmt.Errorf("%w: %d", ErrUnsupportedType, h.Type)
	}
	if h.Op < OpRequest || h.Op > OpCreditRequest {
		return fmt.Errorf("%w: %d", ErrUnknownOp, uint16(h.Op))
	}
	if h.Len > MaxPayload {
		return fmt.Errorf("%w: %d bytes", ErrPayloadTooLarge, h.Len)
	}
	if uint64(h.Len) > payloadRoom {
		return fmt.Errorf("%w: %d bytes, %d readable", ErrPayloadTruncated, h.Len, payloadRoom)
	}
	if h.Len != 0 && h.Op != OpRW {
		return fmt.Errorf("%w: %s with %d bytes", ErrUnexpectedData, h.Op, h.Len)
	}
	return nil
}

// ParsePacket decodes a packet laid out contiguously in b (header then
// payload) and validates it; the payload aliases b. The device reads packets
// through descriptor chains rather than one slice, but applies exactly these
// checks; this form is what the fuzz target and tests exercise.
func ParsePacket(b []byte, guestCID uint64) (Header, []byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, nil, err
	}
	if err := h.Validate(guestCID, uint64(len(b)-HeaderSize)); err != nil {
		return h, nil, err
	}
	return h, b[HeaderSize : HeaderSize+int(h.Len)], nil
}

// answerable reports whether a packet refused with err should be answered
// with RST: only when its addresses are right (so the RST reaches the
// sender) and it is not itself an RST (which would start a ping-pong).
func answerable(h Header, err error) bool {
	return !errors.Is(err, ErrShortHeader) && !errors.Is(err, ErrWrongAddress) && h.Op != OpRST
}

package virgl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The wire between the VMM and smol-gpu is a stream of frames, each a
// little-endian u32 payload length followed by the payload.
//
// The helper speaks first with a hello: HelloMagic, a u32 status (0 when
// the renderer is ready), then for a ready helper a u32 count of capsets
// followed by that many u32 capset IDs, or for a failed one the reason as
// text.
//
// Then the VMM sends requests, one at a time, each a u32 op followed by
// its body, and the helper answers each with a reply: a u32 virtio-gpu
// response type (VIRTIO_GPU_RESP_*) followed by the response's body, the
// part after the 24-byte header (the device writes the header itself, so
// the fence it echoes is always the guest's own).
const (
	// HelloMagic opens the helper's hello ("SGP1").
	HelloMagic uint32 = 0x31504753

	// OpCommand carries a virtio-gpu control command exactly as the
	// guest sent it, header first (the device has checked its length
	// and that it is a 3D command).
	OpCommand uint32 = 1
	// OpAttachBacking carries RESOURCE_ATTACH_BACKING with the guest
	// addresses already checked and turned into offsets in the memory
	// file: u32 resource ID, u32 count, then count pairs of u64 offset,
	// u64 length.
	OpAttachBacking uint32 = 2
	// OpReadScanout asks for a rectangle of a 3D resource the guest
	// shows on its display: u32 resource ID, u32 x, y, width, height.
	// The helper writes the pixels into the scanout buffer (fd 5),
	// rows of width*4 bytes from its start, and replies with the status
	// alone.
	OpReadScanout uint32 = 3

	// MaxFrame bounds a frame either way: a SUBMIT_3D command buffer
	// (MaxSubmitBytes) with room for its header.
	MaxFrame = MaxSubmitBytes + 4096
	// MaxSubmitBytes bounds one SUBMIT_3D command buffer. Mesa's virgl
	// driver flushes its buffer at 256 KiB.
	MaxSubmitBytes = 1 << 20
	// MaxReplyBody bounds a reply's body: the largest is a capset
	// (virgl's are under 2 KiB).
	MaxReplyBody = 64 << 10
	// MaxCapsets bounds the capsets a helper may announce.
	MaxCapsets = 16
)

// ErrFrameTooLarge reports a frame longer than the reader allows.
var ErrFrameTooLarge = errors.New("frame too large")

// WriteFrame writes parts as one frame.
func WriteFrame(w io.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxFrame {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	buf := make([]byte, 4, 4+n)
	binary.LittleEndian.PutUint32(buf, uint32(n))
	for _, p := range parts {
		buf = append(buf, p...)
	}
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame of at most max bytes.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if uint64(size) > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, size, max)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Hello is what the helper announces when it starts.
type Hello struct {
	Capsets []uint32 // capset IDs, in GET_CAPSET_INFO index order
	Err     string   // why the renderer could not start; empty when ready
}

// Encode returns the hello's frame payload.
func (h Hello) Encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, HelloMagic)
	if h.Err != "" {
		b = binary.LittleEndian.AppendUint32(b, 1)
		return append(b, h.Err...)
	}
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Capsets)))
	for _, c := range h.Capsets {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return b
}

// DecodeHello reads a hello, checking every count against what follows.
func DecodeHello(b []byte) (Hello, error) {
	if len(b) < 8 || binary.LittleEndian.Uint32(b) != HelloMagic {
		return Hello{}, errors.New("the helper's first message is not a smol-gpu hello")
	}
	if binary.LittleEndian.Uint32(b[4:]) != 0 {
		msg := string(b[8:])
		if msg == "" {
			msg = "no reason given"
		}
		return Hello{Err: msg}, nil
	}
	if len(b) < 12 {
		return Hello{}, errors.New("hello: truncated")
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if n > MaxCapsets || uint64(len(b)) != 12+4*uint64(n) {
		return Hello{}, fmt.Errorf("hello: %d capsets in %d bytes", n, len(b))
	}
	h := Hello{Capsets: make([]uint32, n)}
	for i := range h.Capsets {
		h.Capsets[i] = binary.LittleEndian.Uint32(b[12+4*i:])
	}
	return h, nil
}

// Range is a run of the guest memory file: what one backing entry names.
type Range struct{ Offset, Length uint64 }

// EncodeAttach returns an OpAttachBacking request.
func EncodeAttach(resource uint32, ranges []Range) []byte {
	b := binary.LittleEndian.AppendUint32(nil, OpAttachBacking)
	b = binary.LittleEndian.AppendUint32(b, resource)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ranges)))
	for _, r := range ranges {
		b = binary.LittleEndian.AppendUint64(b, r.Offset)
		b = binary.LittleEndian.AppendUint64(b, r.Length)
	}
	return b
}

// DecodeAttach reads an OpAttachBacking body (after the op).
func DecodeAttach(b []byte) (resource uint32, ranges []Range, err error) {
	if len(b) < 8 {
		return 0, nil, errors.New("attach: truncated")
	}
	resource, n := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	if uint64(len(b)-8) != uint64(n)*16 {
		return 0, nil, fmt.Errorf("attach: %d entries in %d bytes", n, len(b)-8)
	}
	ranges = make([]Range, n)
	for i := range ranges {
		e := b[8+16*i:]
		ranges[i] = Range{binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint64(e[8:])}
	}
	return resource, ranges, nil
}

// EncodeReply returns a reply: response type typ and its body.
func EncodeReply(typ uint32, body []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, typ), body...)
}

// DecodeReply reads a reply, refusing a type that is not a virtio-gpu
// response (0x1100-0x12ff) or a body over MaxReplyBody.
func DecodeReply(b []byte) (typ uint32, body []byte, err error) {
	if len(b) < 4 {
		return 0, nil, errors.New("reply: truncated")
	}
	typ = binary.LittleEndian.Uint32(b)
	if typ < 0x1100 || typ > 0x12ff {
		return 0, nil, fmt.Errorf("reply: %#x is not a virtio-gpu response type", typ)
	}
	if len(b)-4 > MaxReplyBody {
		return 0, nil, fmt.Errorf("reply: %d-byte body", len(b)-4)
	}
	return typ, b[4:], nil
}

package gpu

import "encoding/binary"

// Feature bits (virtio 1.2, section 5.7.3).
const (
	featureVirgl = 1 << 0 // not offered: 3D needs a renderer
	featureEDID  = 1 << 1
)

// Configuration space layout (section 5.7.4): events_read, events_clear,
// num_scanouts, num_capsets, each a le32.
const (
	configEventsRead  = 0
	configEventsClear = 4
	configNumScanouts = 8
	configNumCapsets  = 12
	configSize        = 16
)

// Queues.
const (
	controlQueue = 0
	cursorQueue  = 1
)

// Command and response types (section 5.7.6.7).
const (
	cmdGetDisplayInfo        = 0x0100
	cmdResourceCreate2D      = 0x0101
	cmdResourceUnref         = 0x0102
	cmdSetScanout            = 0x0103
	cmdResourceFlush         = 0x0104
	cmdTransferToHost2D      = 0x0105
	cmdResourceAttachBacking = 0x0106
	cmdResourceDetachBacking = 0x0107
	cmdGetCapsetInfo         = 0x0108
	cmdGetCapset             = 0x0109
	cmdGetEDID               = 0x010a

	cmdUpdateCursor = 0x0300
	cmdMoveCursor   = 0x0301

	respOKNoData      = 0x1100
	respOKDisplayInfo = 0x1101
	respOKEDID        = 0x1104

	respErrUnspec            = 0x1200
	respErrOutOfMemory       = 0x1201
	respErrInvalidScanoutID  = 0x1202
	respErrInvalidResourceID = 0x1203
	respErrInvalidContextID  = 0x1204
	respErrInvalidParameter  = 0x1205
)

// flagFence asks for the fence in the header to be signalled when the
// command completes; the response echoes it (section 5.7.6.7).
const flagFence = 1 << 0

// maxScanouts is the protocol's limit on scanouts (VIRTIO_GPU_MAX_SCANOUTS):
// GET_DISPLAY_INFO always answers with this many entries.
const maxScanouts = 16

// Sizes of the wire structures.
const (
	headerSize          = 24 // virtio_gpu_ctrl_hdr
	rectSize            = 16 // virtio_gpu_rect
	memEntrySize        = 16 // virtio_gpu_mem_entry
	displayInfoSize     = headerSize + maxScanouts*24
	edidResponseSize    = headerSize + 8 + 1024
	cursorCommandSize   = headerSize + 16 + 16 // header, cursor_pos, resource_id, hot_x, hot_y, padding
	createCommandSize   = headerSize + 16
	unrefCommandSize    = headerSize + 8
	scanoutCommandSize  = headerSize + rectSize + 8
	flushCommandSize    = headerSize + rectSize + 8
	transferCommandSize = headerSize + rectSize + 16
	attachCommandSize   = headerSize + 8 // followed by the entries
	detachCommandSize   = headerSize + 8
	edidCommandSize     = headerSize + 8
)

// header is virtio_gpu_ctrl_hdr, every command's and response's first
// 24 bytes.
type header struct {
	Type    uint32
	Flags   uint32
	FenceID uint64
	CtxID   uint32
	RingIdx uint8
}

func decodeHeader(b []byte) header {
	return header{
		Type:    binary.LittleEndian.Uint32(b[0:]),
		Flags:   binary.LittleEndian.Uint32(b[4:]),
		FenceID: binary.LittleEndian.Uint64(b[8:]),
		CtxID:   binary.LittleEndian.Uint32(b[16:]),
		RingIdx: b[20],
	}
}

// response starts a response of type typ to a command with header req: a
// fenced command's response carries the same fence (the device completes
// every command before answering, so the fence is signalled with it).
func response(req header, typ uint32, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:], typ)
	if req.Flags&flagFence != 0 {
		binary.LittleEndian.PutUint32(b[4:], flagFence)
		binary.LittleEndian.PutUint64(b[8:], req.FenceID)
		binary.LittleEndian.PutUint32(b[16:], req.CtxID)
		b[20] = req.RingIdx
	}
	return b
}

// Rect is a rectangle in a resource's or scanout's pixels.
type Rect struct{ X, Y, Width, Height uint32 }

func decodeRect(b []byte) Rect {
	return Rect{
		X:      binary.LittleEndian.Uint32(b[0:]),
		Y:      binary.LittleEndian.Uint32(b[4:]),
		Width:  binary.LittleEndian.Uint32(b[8:]),
		Height: binary.LittleEndian.Uint32(b[12:]),
	}
}

func putRect(b []byte, r Rect) {
	binary.LittleEndian.PutUint32(b[0:], r.X)
	binary.LittleEndian.PutUint32(b[4:], r.Y)
	binary.LittleEndian.PutUint32(b[8:], r.Width)
	binary.LittleEndian.PutUint32(b[12:], r.Height)
}

// within tells whether r lies inside a width x height area, computed in
// 64 bits so that no guest value can wrap around.
func (r Rect) within(width, height uint32) bool {
	return uint64(r.X)+uint64(r.Width) <= uint64(width) && uint64(r.Y)+uint64(r.Height) <= uint64(height)
}

func (r Rect) empty() bool { return r.Width == 0 || r.Height == 0 }

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

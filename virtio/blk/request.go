package blk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/smolvm/smol/virtio"
)

// Request types (virtio 1.2, section 5.2.6).
const (
	TypeIn          = 0
	TypeOut         = 1
	TypeFlush       = 4
	TypeGetID       = 8
	TypeGetLifetime = 10
	TypeDiscard     = 11
	TypeWriteZeroes = 13
	TypeSecureErase = 14
)

// Status values, the single byte the device writes last.
const (
	StatusOK     = 0
	StatusIOErr  = 1
	StatusUnsupp = 2
)

const (
	// headerSize is struct virtio_blk_outhdr: le32 type, le32 reserved
	// (the legacy I/O priority, ignored), le64 sector.
	headerSize = 16
	// segmentSize is struct virtio_blk_discard_write_zeroes: le64 sector,
	// le32 num_sectors, le32 flags.
	segmentSize = 16
	// IDBytes is the length of the GET_ID string (NUL-padded, no
	// terminator when it fills all 20 bytes).
	IDBytes = 20
	// flagUnmap is the only defined flag of a discard/write-zeroes segment.
	flagUnmap = 1
)

// errNoStatus marks a chain with no writable byte for the status: there is
// nothing to answer in, so the device returns the chain with 0 bytes
// written and the driver sees an I/O failure.
var errNoStatus = errors.New("blk: request has no writable status byte")

// statusError is a request the device refuses with a status code, and why
// (the reason is for logs and tests; the guest only sees the status).
type statusError struct {
	status uint8
	reason string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("blk: status %d: %s", e.status, e.reason)
}

func ioErr(format string, args ...any) error {
	return &statusError{StatusIOErr, fmt.Sprintf(format, args...)}
}

func unsupp(format string, args ...any) error {
	return &statusError{StatusUnsupp, fmt.Sprintf(format, args...)}
}

// limits is what a request is checked against: the disk and the features
// the driver accepted.
type limits struct {
	sectors  uint64
	readOnly bool
	features uint64
}

// segment is one range of a discard or write-zeroes request, copied out of
// guest memory.
type segment struct {
	sector  uint64
	sectors uint32
	unmap   bool
}

// request is a validated virtio-blk request. The byte slices alias guest
// memory (the guest may change their contents at any time, which only
// affects its own data); every number the device acts on was copied out
// before it was checked.
type request struct {
	kind   uint32
	sector uint64
	// data is the payload in guest memory: the device-writable buffers
	// (less the status byte) for IN and GET_ID, the device-readable
	// buffers after the header for OUT.
	data     [][]byte
	dataLen  uint64
	segments []segment
	// status is the last writable byte; nil only with errNoStatus.
	status []byte
}

// parseRequest splits a chain's buffers into header, payload and status
// and validates the request against lim.
//
// The result always carries the status byte when the chain has one. On
// error, a *statusError says which status to report; any other error
// (errNoStatus, or writable buffers outside guest RAM) means the chain
// cannot be answered and goes back with nothing written.
func parseRequest(mem virtio.Memory, readable, writable []virtio.Buffer, lim limits) (request, error) {
	var req request
	out, err := mapBuffers(mem, writable)
	if err != nil {
		return req, fmt.Errorf("blk: writable buffers: %w", err)
	}
	req.status, out = takeLast(out)
	if req.status == nil {
		return req, errNoStatus
	}
	in, err := mapBuffers(mem, readable)
	if err != nil {
		return req, ioErr("readable buffers: %v", err)
	}
	var hdr [headerSize]byte
	in, ok := takeFront(in, hdr[:])
	if !ok {
		return req, ioErr("header shorter than %d bytes", headerSize)
	}
	req.kind = binary.LittleEndian.Uint32(hdr[0:])
	req.sector = binary.LittleEndian.Uint64(hdr[8:])

	switch req.kind {
	case TypeIn:
		req.data, req.dataLen = out, totalLen(out)
		return req, checkData(req, lim)
	case TypeOut:
		if lim.readOnly {
			// virtio 1.2, 5.2.6.2: a write to a read-only device fails
			// with IOERR and writes nothing.
			return req, ioErr("write to a read-only disk")
		}
		req.data, req.dataLen = in, totalLen(in)
		return req, checkData(req, lim)
	case TypeFlush:
		return req, nil
	case TypeGetID:
		req.data, req.dataLen = out, totalLen(out)
		return req, nil
	case TypeDiscard, TypeWriteZeroes:
		segs, err := parseSegments(req.kind, in, lim)
		req.segments = segs
		return req, err
	default:
		return req, unsupp("request type %d", req.kind)
	}
}

// maxDataLen bounds the payload of one read or write to what a driver that
// honours seg_max and size_max can send. It keeps the work per request
// bounded even when a hostile chain lists overlapping buffers.
const maxDataLen = SegMax * SizeMax

// checkData validates the range of a read or write.
func checkData(req request, lim limits) error {
	if req.dataLen > maxDataLen {
		return ioErr("data length %d exceeds %d", req.dataLen, maxDataLen)
	}
	if req.dataLen%SectorSize != 0 {
		return ioErr("data length %d is not a multiple of %d", req.dataLen, SectorSize)
	}
	if !inRange(req.sector, req.dataLen/SectorSize, lim.sectors) {
		return ioErr("sectors [%d, +%d) outside the disk (%d sectors)", req.sector, req.dataLen/SectorSize, lim.sectors)
	}
	return nil
}

// maxSectors is the most sectors whose byte offsets fit an int64 (file
// offsets). Real disks are far smaller; the check keeps the arithmetic safe
// whatever capacity the parser is handed.
const maxSectors = math.MaxInt64 / SectorSize

// inRange reports whether [sector, sector+count) lies within a disk of
// capacity sectors, without overflowing.
func inRange(sector, count, capacity uint64) bool {
	capacity = min(capacity, maxSectors)
	return sector <= capacity && count <= capacity-sector
}

// parseSegments copies out and validates the segments of a discard or
// write-zeroes request (virtio 1.2, 5.2.6.2): unknown flags, and the unmap
// flag on a discard, are UNSUPP; a bad segment count, an oversized segment
// or a range outside the disk is IOERR.
func parseSegments(kind uint32, payload [][]byte, lim limits) ([]segment, error) {
	feature, maxSegs, maxSectors, name := uint64(FeatureDiscard), MaxDiscardSegs, uint32(MaxDiscardSectors), "discard"
	if kind == TypeWriteZeroes {
		feature, maxSegs, maxSectors, name = FeatureWriteZeroes, MaxWriteZeroesSegs, MaxWriteZeroesSectors, "write zeroes"
	}
	if lim.features&feature == 0 {
		return nil, unsupp("%s was not negotiated", name)
	}
	if lim.readOnly {
		return nil, ioErr("%s on a read-only disk", name)
	}
	n := totalLen(payload)
	if n == 0 || n%segmentSize != 0 || n/segmentSize > uint64(maxSegs) {
		return nil, ioErr("%s payload of %d bytes: want 1 to %d segments of %d bytes", name, n, maxSegs, segmentSize)
	}
	segs := make([]segment, 0, n/segmentSize)
	var raw [segmentSize]byte
	for len(segs) < cap(segs) {
		payload, _ = takeFront(payload, raw[:])
		flags := binary.LittleEndian.Uint32(raw[12:])
		s := segment{
			sector:  binary.LittleEndian.Uint64(raw[0:]),
			sectors: binary.LittleEndian.Uint32(raw[8:]),
			unmap:   flags&flagUnmap != 0,
		}
		switch {
		case flags&^flagUnmap != 0:
			return nil, unsupp("%s segment flags %#x", name, flags)
		case s.unmap && kind == TypeDiscard:
			return nil, unsupp("discard segment with the unmap flag")
		case s.sectors > maxSectors:
			return nil, ioErr("%s segment of %d sectors (max %d)", name, s.sectors, maxSectors)
		case !inRange(s.sector, uint64(s.sectors), lim.sectors):
			return nil, ioErr("%s sectors [%d, +%d) outside the disk (%d sectors)", name, s.sector, s.sectors, lim.sectors)
		}
		segs = append(segs, s)
	}
	return segs, nil
}

// mapBuffers turns chain buffers into host slices of guest memory. The
// queue already checked them; mapping again costs little and keeps this
// parser safe on its own (it is fuzzed without a queue).
func mapBuffers(mem virtio.Memory, bufs []virtio.Buffer) ([][]byte, error) {
	out := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		if b.Len == 0 {
			continue
		}
		s, err := mem.Slice(b.Addr, uint64(b.Len))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// takeFront copies the first len(dst) bytes of bufs into dst and returns
// the rest of bufs (a new list; bufs is not modified). ok is false when
// bufs holds fewer bytes.
func takeFront(bufs [][]byte, dst []byte) (rest [][]byte, ok bool) {
	for len(dst) > 0 {
		if len(bufs) == 0 {
			return nil, false
		}
		n := copy(dst, bufs[0])
		dst = dst[n:]
		if n < len(bufs[0]) {
			rest = append([][]byte{bufs[0][n:]}, bufs[1:]...)
			return rest, true
		}
		bufs = bufs[1:]
	}
	return bufs, true
}

// takeLast splits the last byte off bufs (which holds no empty buffers):
// the status byte, and the payload before it. last is nil when bufs is
// empty.
func takeLast(bufs [][]byte) (last []byte, rest [][]byte) {
	if len(bufs) == 0 {
		return nil, nil
	}
	end := bufs[len(bufs)-1]
	last = end[len(end)-1:]
	rest = bufs[: len(bufs)-1 : len(bufs)-1]
	if len(end) > 1 {
		rest = append(rest, end[:len(end)-1])
	}
	return last, rest
}

func totalLen(bufs [][]byte) uint64 {
	var n uint64
	for _, b := range bufs {
		n += uint64(len(b))
	}
	return n
}

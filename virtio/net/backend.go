package net

import (
	"context"
	"syscall"
)

// Backend is the host side of a network device: where the guest's frames go
// and where the frames for the guest come from. A TAP interface
// (netdev/tap.TAP) is one; a userspace network stack enforcing egress policy
// can be another.
//
// Every frame crosses the interface with its HeaderSize-byte virtio-net
// header in front, little-endian, as in virtio 1.x. The device calls
// ReadPacket, WritePacket and SetOffloads from its worker goroutine and
// WaitReadable from a second goroutine, concurrently with them.
type Backend interface {
	// ReadPacket reads the next frame for the guest into bufs, in order,
	// without blocking, and returns its length including the header. A
	// frame longer than bufs is truncated; the device offers one byte more
	// than MaxPacketLen, so a full read tells it the frame was too long.
	// With no frame pending it returns an error matching ErrNoPacket.
	// The bufs are guest memory: the backend must not keep them.
	ReadPacket(bufs [][]byte) (int, error)
	// WritePacket sends one frame from the guest, gathered from bufs in
	// order. The first buffer holds the whole header, already validated
	// against the negotiated features. It should not block for long: the
	// device's worker waits for it. The bufs are guest memory (except the
	// header): the backend must not keep them.
	WritePacket(bufs [][]byte) (int, error)
	// WaitReadable blocks until ReadPacket may have a frame, or until ctx
	// is done (then it returns ctx.Err()). A spurious return is allowed;
	// returning at once while nothing is pending is not (it would spin).
	WaitReadable(ctx context.Context) error
	// SupportedOffloads returns which of OffloadFeatures the backend
	// honours; the device offers only those.
	SupportedOffloads() uint64
	// SetOffloads applies the virtio-net features the driver negotiated:
	// the backend must then deliver partially checksummed frames or
	// super-frames only as far as the driver accepted them.
	SetOffloads(features uint64) error
	// Close releases the backend; the device's Close calls it.
	Close() error
}

// ErrNoPacket is what ReadPacket returns (possibly wrapped) when no frame
// is pending: EAGAIN, exactly what a non-blocking read of a TAP returns, so
// a TAP backend passes it through without allocating.
var ErrNoPacket error = syscall.EAGAIN

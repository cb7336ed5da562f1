package gpu

import (
	"cmp"
	"slices"

	"github.com/smolvm/smol/virtio"
)

// resource is one 2D resource: the host's copy of its pixels and the
// guest pages that back it.
type resource struct {
	id            uint32
	format        uint32
	width, height uint32
	pixels        []byte // width*height*4 bytes, row-major, stride width*4
	backing       []virtio.Buffer
	backingLen    uint64 // total bytes of backing
	backingStarts []uint64
}

func (r *resource) stride() uint64 { return uint64(r.width) * bytesPerPixel }

// resources is the table of a device's resources and what they cost the
// host, checked against the limits on every create and attach.
type resources struct {
	limits    Limits
	byID      map[uint32]*resource
	hostBytes uint64
}

func newResources(l Limits) resources {
	return resources{limits: l, byID: map[uint32]*resource{}}
}

// create is RESOURCE_CREATE_2D. Resource ID 0 means "no resource" in
// SET_SCANOUT and UPDATE_CURSOR, so it cannot name one.
func (t *resources) create(id, format, width, height uint32) uint32 {
	switch {
	case id == 0:
		return respErrInvalidResourceID
	case t.byID[id] != nil:
		return respErrInvalidResourceID
	case formatChannels[format] == (channels{}):
		return respErrInvalidParameter
	case width == 0 || height == 0:
		return respErrInvalidParameter
	}
	size := uint64(width) * uint64(height) * bytesPerPixel
	if len(t.byID) >= t.limits.MaxResources || size > t.limits.MaxHostBytes-t.hostBytes {
		return respErrOutOfMemory
	}
	t.byID[id] = &resource{id: id, format: format, width: width, height: height, pixels: make([]byte, size)}
	t.hostBytes += size
	return respOKNoData
}

// unref is RESOURCE_UNREF: the resource and the host's copy go; the
// caller takes it off the scanout.
func (t *resources) unref(id uint32) uint32 {
	r := t.byID[id]
	if r == nil {
		return respErrInvalidResourceID
	}
	t.hostBytes -= uint64(len(r.pixels))
	delete(t.byID, id)
	return respOKNoData
}

// attach is RESOURCE_ATTACH_BACKING, the list checked by checkBacking
// and kept as given, in order, since that order is the backing's byte
// order.
func (t *resources) attach(mem virtio.Memory, id uint32, entries []virtio.Buffer) uint32 {
	r := t.byID[id]
	switch {
	case r == nil:
		return respErrInvalidResourceID
	case r.backing != nil:
		return respErrUnspec // the spec leaves it open; QEMU answers the same
	}
	starts, total, resp := checkBacking(mem, entries, t.limits.MaxBackingEntries)
	if resp != respOKNoData {
		return resp
	}
	r.backing, r.backingStarts, r.backingLen = entries, starts, total
	return respOKNoData
}

// checkBacking checks a backing list, for 2D and 3D resources alike:
// at least one and at most max entries, every entry non-empty and in
// guest RAM, no two overlapping (a transfer would otherwise read the same
// guest bytes for two parts of the picture, which no driver does). It
// returns where each entry starts in the backing and the total length.
func checkBacking(mem virtio.Memory, entries []virtio.Buffer, max int) (starts []uint64, total uint64, resp uint32) {
	switch {
	case len(entries) == 0:
		return nil, 0, respErrInvalidParameter
	case len(entries) > max:
		return nil, 0, respErrOutOfMemory
	}
	starts = make([]uint64, len(entries))
	for i, e := range entries {
		if e.Len == 0 {
			return nil, 0, respErrInvalidParameter
		}
		if _, err := mem.Slice(e.Addr, uint64(e.Len)); err != nil {
			return nil, 0, respErrInvalidParameter
		}
		starts[i] = total
		total += uint64(e.Len)
	}
	if overlapping(entries) {
		return nil, 0, respErrInvalidParameter
	}
	return starts, total, respOKNoData
}

// overlapping tells whether any two entries share a guest byte.
func overlapping(entries []virtio.Buffer) bool {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b virtio.Buffer) int { return cmp.Compare(a.Addr, b.Addr) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i-1].Addr+uint64(sorted[i-1].Len) > sorted[i].Addr {
			return true
		}
	}
	return false
}

// detach is RESOURCE_DETACH_BACKING: the host's copy stays, the guest
// pages are no longer read.
func (t *resources) detach(id uint32) uint32 {
	r := t.byID[id]
	switch {
	case r == nil:
		return respErrInvalidResourceID
	case r.backing == nil:
		return respErrUnspec
	}
	r.backing, r.backingStarts, r.backingLen = nil, nil, 0
	return respOKNoData
}

// transfer is TRANSFER_TO_HOST_2D: rectangle rect of the resource is
// copied from its backing, which is laid out like the resource (stride
// width*4), the rectangle's first byte at offset. The whole source range
// must lie in the backing.
func (t *resources) transfer(mem virtio.Memory, id uint32, rect Rect, offset uint64) uint32 {
	r := t.byID[id]
	switch {
	case r == nil:
		return respErrInvalidResourceID
	case r.backing == nil:
		return respErrUnspec
	case !rect.within(r.width, r.height):
		return respErrInvalidParameter
	case rect.empty():
		return respOKNoData
	}
	stride := r.stride()
	rowBytes := uint64(rect.Width) * bytesPerPixel
	// span is at most the resource's size, which create bounded; offset is
	// the guest's, so it is compared without adding to it.
	span := stride*uint64(rect.Height-1) + rowBytes
	if offset > r.backingLen || span > r.backingLen-offset {
		return respErrInvalidParameter
	}
	for row := uint64(0); row < uint64(rect.Height); row++ {
		dst := (uint64(rect.Y)+row)*stride + uint64(rect.X)*bytesPerPixel
		if err := r.readBacking(mem, r.pixels[dst:dst+rowBytes], offset+row*stride); err != nil {
			return respErrUnspec
		}
	}
	return respOKNoData
}

// readBacking fills dst from the backing's bytes starting at off (the
// caller checked that they exist).
func (r *resource) readBacking(mem virtio.Memory, dst []byte, off uint64) error {
	i, found := slices.BinarySearch(r.backingStarts, off)
	if !found {
		i--
	}
	for len(dst) > 0 {
		e := r.backing[i]
		in := off - r.backingStarts[i]
		n := min(uint64(len(dst)), uint64(e.Len)-in)
		src, err := mem.Slice(e.Addr+in, n)
		if err != nil {
			return err
		}
		copy(dst, src)
		dst, off, i = dst[n:], off+n, i+1
	}
	return nil
}

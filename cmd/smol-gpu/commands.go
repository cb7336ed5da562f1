//go:build cgo

package main

import "encoding/binary"

// virtio-gpu command and response types the helper serves (virtio 1.2,
// section 5.7.6.7).
const (
	cmdResourceUnref         = 0x0102
	cmdResourceDetachBacking = 0x0107
	cmdGetCapsetInfo         = 0x0108
	cmdGetCapset             = 0x0109
	cmdCtxCreate             = 0x0200
	cmdCtxDestroy            = 0x0201
	cmdCtxAttachResource     = 0x0202
	cmdCtxDetachResource     = 0x0203
	cmdResourceCreate3D      = 0x0204
	cmdTransferToHost3D      = 0x0205
	cmdTransferFromHost3D    = 0x0206
	cmdSubmit3D              = 0x0207

	respOKNoData            = 0x1100
	respOKCapsetInfo        = 0x1102
	respOKCapset            = 0x1103
	respErrUnspec           = 0x1200
	respErrInvalidResource  = 0x1203
	respErrInvalidContext   = 0x1204
	respErrInvalidParameter = 0x1205

	flagFence  = 1
	headerSize = 24
	// maxCapsetBytes bounds a capset the renderer may describe.
	maxCapsetBytes = 64 << 10
)

// memRange is a checked run of the guest RAM mapping.
type memRange struct{ offset, length uint64 }

// transfer3D is virtio_gpu_transfer_host_3d after its header.
type transfer3D struct {
	ctx                 uint32
	box                 [6]uint32 // x, y, z, w, h, d
	offset              uint64
	resource, level     uint32
	stride, layerStride uint32
}

// command runs one virtio-gpu command and returns the reply's type and
// body. Every field is the guest's: sizes are checked here, values by
// virglrenderer.
func (r *renderer) command(cmd []byte) (uint32, []byte) {
	if len(cmd) < headerSize {
		return respErrUnspec, nil
	}
	typ := le32(cmd)
	flags := le32(cmd[4:])
	ctx := le32(cmd[16:])
	b := cmd[headerSize:]
	need := func(n int) bool { return len(b) >= n }
	status := func(rc int, bad uint32) uint32 {
		if rc != 0 {
			return bad
		}
		return respOKNoData
	}
	resp := uint32(respOKNoData)
	var body []byte
	switch typ {
	case cmdGetCapsetInfo:
		if !need(8) {
			return respErrUnspec, nil
		}
		ids := r.capsets()
		i := le32(b)
		if uint64(i) >= uint64(len(ids)) {
			return respErrInvalidParameter, nil
		}
		v, size := r.capsetInfo(ids[i])
		body = make([]byte, 16)
		binary.LittleEndian.PutUint32(body, ids[i])
		binary.LittleEndian.PutUint32(body[4:], v)
		binary.LittleEndian.PutUint32(body[8:], size)
		return respOKCapsetInfo, body
	case cmdGetCapset:
		if !need(8) {
			return respErrUnspec, nil
		}
		caps, err := r.capset(le32(b), le32(b[4:]))
		if err != nil {
			return respErrInvalidParameter, nil
		}
		return respOKCapset, caps
	case cmdCtxCreate:
		if !need(72) || ctx == 0 {
			return respErrInvalidContext, nil
		}
		nlen := min(le32(b), 64)
		resp = status(r.createContext(ctx, b[8:8+nlen]), respErrInvalidContext)
	case cmdCtxDestroy:
		r.destroyContext(ctx)
	case cmdCtxAttachResource, cmdCtxDetachResource:
		if !need(8) {
			return respErrUnspec, nil
		}
		if typ == cmdCtxAttachResource {
			r.attachToContext(ctx, le32(b))
		} else {
			r.detachFromContext(ctx, le32(b))
		}
	case cmdResourceCreate3D:
		if !need(48) {
			return respErrUnspec, nil
		}
		var a [11]uint32
		for i := range a {
			a[i] = le32(b[4*i:])
		}
		if a[0] == 0 {
			return respErrInvalidResource, nil
		}
		resp = status(r.createResource(a), respErrInvalidParameter)
	case cmdResourceUnref:
		if !need(8) {
			return respErrUnspec, nil
		}
		r.unref(le32(b))
	case cmdResourceDetachBacking:
		if !need(8) {
			return respErrUnspec, nil
		}
		if !r.detach(le32(b)) {
			resp = respErrUnspec
		}
	case cmdTransferToHost3D, cmdTransferFromHost3D:
		if !need(48) {
			return respErrUnspec, nil
		}
		t := transfer3D{ctx: ctx, offset: le64(b[24:]), resource: le32(b[32:]), level: le32(b[36:]),
			stride: le32(b[40:]), layerStride: le32(b[44:])}
		for i := range t.box {
			t.box[i] = le32(b[4*i:])
		}
		resp = status(r.transfer(typ == cmdTransferToHost3D, t), respErrInvalidParameter)
	case cmdSubmit3D:
		if !need(8) {
			return respErrUnspec, nil
		}
		size := le32(b)
		if size%4 != 0 || uint64(size) > uint64(len(b)-8) {
			return respErrInvalidParameter, nil
		}
		resp = status(r.submit(ctx, b[8:8+size]), respErrInvalidParameter)
	default:
		return respErrUnspec, nil
	}
	if flags&flagFence != 0 {
		if err := r.fence(ctx); err != nil {
			return respErrUnspec, nil
		}
	}
	return resp, body
}

// attachBacking serves an OpAttachBacking request: every range must lie
// in the guest RAM mapping (the VMM checked them against guest RAM; the
// helper checks again against what it mapped).
func (r *renderer) attachBacking(res uint32, ranges []memRange) uint32 {
	size := uint64(len(r.mem))
	for _, g := range ranges {
		if g.length == 0 || g.offset > size || g.length > size-g.offset {
			return respErrInvalidParameter
		}
	}
	if r.attached[res] {
		return respErrUnspec
	}
	if rc := r.attach(res, ranges); rc != 0 {
		return respErrInvalidResource
	}
	return respOKNoData
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

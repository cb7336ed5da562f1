//go:build cgo

package main

import (
	"encoding/binary"

	"github.com/smolvm/smol/devices/gpu/virgl"
)

// maxCapsetBytes bounds a capset the renderer may describe.
const maxCapsetBytes = 64 << 10

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
	if len(cmd) < virgl.HeaderSize {
		return virgl.RespErrUnspec, nil
	}
	typ := le32(cmd)
	flags := le32(cmd[4:])
	ctx := le32(cmd[16:])
	b := cmd[virgl.HeaderSize:]
	need := func(n int) bool { return len(b) >= n }
	status := func(rc int, bad uint32) uint32 {
		if rc != 0 {
			return bad
		}
		return virgl.RespOKNoData
	}
	resp := uint32(virgl.RespOKNoData)
	var body []byte
	switch typ {
	case virgl.CmdGetCapsetInfo:
		if !need(8) {
			return virgl.RespErrUnspec, nil
		}
		ids := r.capsets()
		i := le32(b)
		if uint64(i) >= uint64(len(ids)) {
			return virgl.RespErrInvalidParameter, nil
		}
		v, size := r.capsetInfo(ids[i])
		body = make([]byte, 16)
		binary.LittleEndian.PutUint32(body, ids[i])
		binary.LittleEndian.PutUint32(body[4:], v)
		binary.LittleEndian.PutUint32(body[8:], size)
		return virgl.RespOKCapsetInfo, body
	case virgl.CmdGetCapset:
		if !need(8) {
			return virgl.RespErrUnspec, nil
		}
		caps, err := r.capset(le32(b), le32(b[4:]))
		if err != nil {
			return virgl.RespErrInvalidParameter, nil
		}
		return virgl.RespOKCapset, caps
	case virgl.CmdCtxCreate:
		if !need(72) || ctx == 0 {
			return virgl.RespErrInvalidContext, nil
		}
		nlen := min(le32(b), 64)
		resp = status(r.createContext(ctx, b[8:8+nlen]), virgl.RespErrInvalidContext)
	case virgl.CmdCtxDestroy:
		r.destroyContext(ctx)
	case virgl.CmdCtxAttachResource, virgl.CmdCtxDetachResource:
		if !need(8) {
			return virgl.RespErrUnspec, nil
		}
		if typ == virgl.CmdCtxAttachResource {
			r.attachToContext(ctx, le32(b))
		} else {
			r.detachFromContext(ctx, le32(b))
		}
	case virgl.CmdResourceCreate3D:
		if !need(48) {
			return virgl.RespErrUnspec, nil
		}
		var a [11]uint32
		for i := range a {
			a[i] = le32(b[4*i:])
		}
		if a[0] == 0 {
			return virgl.RespErrInvalidResource, nil
		}
		resp = status(r.createResource(a), virgl.RespErrInvalidParameter)
	case virgl.CmdResourceUnref:
		if !need(8) {
			return virgl.RespErrUnspec, nil
		}
		r.unref(le32(b))
	case virgl.CmdResourceDetachBacking:
		if !need(8) {
			return virgl.RespErrUnspec, nil
		}
		if !r.detach(le32(b)) {
			resp = virgl.RespErrUnspec
		}
	case virgl.CmdTransferToHost3D, virgl.CmdTransferFromHost3D:
		if !need(48) {
			return virgl.RespErrUnspec, nil
		}
		t := transfer3D{ctx: ctx, offset: le64(b[24:]), resource: le32(b[32:]), level: le32(b[36:]),
			stride: le32(b[40:]), layerStride: le32(b[44:])}
		for i := range t.box {
			t.box[i] = le32(b[4*i:])
		}
		resp = status(r.transfer(typ == virgl.CmdTransferToHost3D, t), virgl.RespErrInvalidParameter)
	case virgl.CmdSubmit3D:
		if !need(8) {
			return virgl.RespErrUnspec, nil
		}
		size := le32(b)
		if size%4 != 0 || uint64(size) > uint64(len(b)-8) {
			return virgl.RespErrInvalidParameter, nil
		}
		resp = status(r.submit(ctx, b[8:8+size]), virgl.RespErrInvalidParameter)
	default:
		return virgl.RespErrUnspec, nil
	}
	if flags&virgl.FlagFence != 0 {
		if err := r.fence(ctx); err != nil {
			return virgl.RespErrUnspec, nil
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
			return virgl.RespErrInvalidParameter
		}
	}
	if r.attached[res] {
		return virgl.RespErrUnspec
	}
	if rc := r.attach(res, ranges); rc != 0 {
		return virgl.RespErrInvalidResource
	}
	return virgl.RespOKNoData
}

// readScanout serves OpReadScanout: the rectangle must fit the scanout
// buffer (virglrenderer checks it against the resource).
func (r *renderer) readScanout(res, x, y, width, height uint32) uint32 {
	n := uint64(width) * uint64(height) * 4
	if n == 0 || n > uint64(len(r.scanout)) {
		return virgl.RespErrInvalidParameter
	}
	if rc := r.readInto(res, [6]uint32{x, y, 0, width, height, 1}, width*4, r.scanout[:n]); rc != 0 {
		return virgl.RespErrInvalidParameter
	}
	return virgl.RespOKNoData
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

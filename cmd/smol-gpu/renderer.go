//go:build cgo

package main

/*
#cgo LDFLAGS: -lvirglrenderer
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <virgl/virglrenderer.h>

// The header only declares struct virgl_box; this is virglrenderer's
// layout (vrend_renderer.h): a transfer's origin and size in texels.
struct virgl_box {
	uint32_t x, y, z;
	uint32_t w, h, d;
};

// virglrenderer reports retired fences through a callback from inside
// virgl_renderer_poll, on the calling thread; the helper only ever asks
// for the latest.
static uint32_t smol_last_fence;
static void smol_write_fence(void *cookie, uint32_t fence) { smol_last_fence = fence; }
static struct virgl_renderer_callbacks smol_callbacks = {
	.version = 1,
	.write_fence = smol_write_fence,
};
static int smol_cookie; // virgl_renderer_init refuses a NULL cookie

static int smol_init(int flags) { return virgl_renderer_init(&smol_cookie, flags, &smol_callbacks); }
static uint32_t smol_fence(void) { return smol_last_fence; }

static struct iovec *smol_iovecs(int n) { return calloc(n, sizeof(struct iovec)); }
static void smol_set_iovec(struct iovec *v, int i, void *base, size_t len) { v[i].iov_base = base; v[i].iov_len = len; }

static int smol_detach(int res) {
	struct iovec *iov = NULL;
	int n = 0;
	virgl_renderer_resource_detach_iov(res, &iov, &n);
	free(iov);
	return iov != NULL;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// capsetIDs are the virgl capability sets, in the order the helper
// offers them (VIRTIO_GPU_CAPSET_VIRGL, VIRTIO_GPU_CAPSET_VIRGL2).
var capsetIDs = []uint32{1, 2}

// renderer is virglrenderer, initialised, on the thread that must make
// every call (its GL contexts are current there).
type renderer struct {
	mem       []byte // guest RAM, mapped shared
	scanout   []byte // the scanout buffer the VMM reads (may be empty)
	nextFence uint32
	attached  map[uint32]bool // resources with a backing the helper allocated
}

func newRenderer(mem, scanout []byte) (*renderer, error) {
	if rc := C.smol_init(C.VIRGL_RENDERER_USE_EGL | C.VIRGL_RENDERER_USE_SURFACELESS); rc != 0 {
		return nil, fmt.Errorf("virglrenderer could not start (error %d): no usable EGL/OpenGL (Mesa's libegl-mesa0 and libgl1-mesa-dri)", int(rc))
	}
	return &renderer{mem: mem, scanout: scanout, attached: map[uint32]bool{}}, nil
}

// capsets returns the IDs of the capsets the renderer fills.
func (r *renderer) capsets() []uint32 {
	var out []uint32
	for _, id := range capsetIDs {
		if _, size := r.capsetInfo(id); size > 0 {
			out = append(out, id)
		}
	}
	return out
}

func (r *renderer) capsetInfo(id uint32) (maxVersion, maxSize uint32) {
	var v, s C.uint32_t
	C.virgl_renderer_get_cap_set(C.uint32_t(id), &v, &s)
	return uint32(v), uint32(s)
}

func (r *renderer) capset(id, version uint32) ([]byte, error) {
	maxVersion, size := r.capsetInfo(id)
	if size == 0 || version > maxVersion || size > maxCapsetBytes {
		return nil, errors.New("no such capset version")
	}
	buf := C.calloc(1, C.size_t(size))
	defer C.free(buf)
	C.virgl_renderer_fill_caps(C.uint32_t(id), C.uint32_t(version), buf)
	return C.GoBytes(buf, C.int(size)), nil
}

func (r *renderer) createContext(ctx uint32, name []byte) int {
	var p *C.char
	if len(name) > 0 {
		p = (*C.char)(unsafe.Pointer(&name[0]))
	}
	return int(C.virgl_renderer_context_create(C.uint32_t(ctx), C.uint32_t(len(name)), p))
}

func (r *renderer) destroyContext(ctx uint32) { C.virgl_renderer_context_destroy(C.uint32_t(ctx)) }

func (r *renderer) attachToContext(ctx, res uint32) {
	C.virgl_renderer_ctx_attach_resource(C.int(ctx), C.int(res))
}

func (r *renderer) detachFromContext(ctx, res uint32) {
	C.virgl_renderer_ctx_detach_resource(C.int(ctx), C.int(res))
}

// createResource is RESOURCE_CREATE_3D; a holds its twelve le32 fields
// (the last is padding).
func (r *renderer) createResource(a [11]uint32) int {
	args := C.struct_virgl_renderer_resource_create_args{
		handle: C.uint32_t(a[0]), target: C.uint32_t(a[1]), format: C.uint32_t(a[2]), bind: C.uint32_t(a[3]),
		width: C.uint32_t(a[4]), height: C.uint32_t(a[5]), depth: C.uint32_t(a[6]), array_size: C.uint32_t(a[7]),
		last_level: C.uint32_t(a[8]), nr_samples: C.uint32_t(a[9]), flags: C.uint32_t(a[10]),
	}
	return int(C.virgl_renderer_resource_create(&args, nil, 0))
}

// unref drops a resource and the helper's list of its backing.
func (r *renderer) unref(res uint32) {
	r.detach(res)
	C.virgl_renderer_resource_unref(C.uint32_t(res))
}

// attach gives resource res its backing: ranges of guest RAM, already
// checked against the mapping.
func (r *renderer) attach(res uint32, ranges []memRange) int {
	if len(ranges) == 0 {
		return -1
	}
	iov := C.smol_iovecs(C.int(len(ranges)))
	if iov == nil {
		return -1
	}
	for i, g := range ranges {
		C.smol_set_iovec(iov, C.int(i), unsafe.Pointer(&r.mem[g.offset]), C.size_t(g.length))
	}
	if rc := C.virgl_renderer_resource_attach_iov(C.int(res), iov, C.int(len(ranges))); rc != 0 {
		C.free(unsafe.Pointer(iov))
		return int(rc)
	}
	r.attached[res] = true
	return 0
}

// detach takes a resource's backing away and frees the list; it reports
// whether there was one.
func (r *renderer) detach(res uint32) bool {
	if !r.attached[res] {
		return false
	}
	delete(r.attached, res)
	return C.smol_detach(C.int(res)) != 0
}

// transfer is TRANSFER_TO_HOST_3D (toHost) or TRANSFER_FROM_HOST_3D,
// between a resource and its attached backing.
func (r *renderer) transfer(toHost bool, t transfer3D) int {
	box := C.struct_virgl_box{
		x: C.uint32_t(t.box[0]), y: C.uint32_t(t.box[1]), z: C.uint32_t(t.box[2]),
		w: C.uint32_t(t.box[3]), h: C.uint32_t(t.box[4]), d: C.uint32_t(t.box[5]),
	}
	if toHost {
		return int(C.virgl_renderer_transfer_write_iov(C.uint32_t(t.resource), C.uint32_t(t.ctx), C.int(t.level),
			C.uint32_t(t.stride), C.uint32_t(t.layerStride), &box, C.uint64_t(t.offset), nil, 0))
	}
	return int(C.virgl_renderer_transfer_read_iov(C.uint32_t(t.resource), C.uint32_t(t.ctx), C.uint32_t(t.level),
		C.uint32_t(t.stride), C.uint32_t(t.layerStride), &box, C.uint64_t(t.offset), nil, 0))
}

// readInto reads a box of a resource's level 0 into buf (rows of stride
// bytes), through a one-entry iovec: the resource's own backing is left
// alone.
func (r *renderer) readInto(res uint32, box [6]uint32, stride uint32, buf []byte) int {
	iov := C.smol_iovecs(1)
	if iov == nil {
		return -1
	}
	defer C.free(unsafe.Pointer(iov))
	C.smol_set_iovec(iov, 0, unsafe.Pointer(&buf[0]), C.size_t(len(buf)))
	b := C.struct_virgl_box{
		x: C.uint32_t(box[0]), y: C.uint32_t(box[1]), z: C.uint32_t(box[2]),
		w: C.uint32_t(box[3]), h: C.uint32_t(box[4]), d: C.uint32_t(box[5]),
	}
	return int(C.virgl_renderer_transfer_read_iov(C.uint32_t(res), 0, 0, C.uint32_t(stride), 0, &b, 0, iov, 1))
}

// submit runs a context's command buffer (whole dwords).
func (r *renderer) submit(ctx uint32, buf []byte) int {
	if len(buf) == 0 {
		return 0
	}
	cbuf := C.CBytes(buf) // virglrenderer may decode in place
	defer C.free(cbuf)
	return int(C.virgl_renderer_submit_cmd(cbuf, C.int(ctx), C.int(len(buf)/4)))
}

// fence waits until everything submitted so far on ctx has finished.
func (r *renderer) fence(ctx uint32) error {
	// One fence is outstanding at a time and fences retire in order, so
	// the fence is done when it is the latest retired. IDs stay positive
	// (virglrenderer takes an int).
	r.nextFence = r.nextFence%0x7fffffff + 1
	want := r.nextFence
	if rc := C.virgl_renderer_create_fence(C.int(want), C.uint32_t(ctx)); rc != 0 {
		return fmt.Errorf("create fence: error %d", int(rc))
	}
	pause := 20 * time.Microsecond
	for {
		C.virgl_renderer_poll()
		if uint32(C.smol_fence()) == want {
			return nil
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

package gpu

import (
	"encoding/binary"
	"errors"
	"image"

	"github.com/smolvm/smol/devices/gpu/virgl"
	"log/slog"

	"github.com/smolvm/smol/virtio"
)

// Renderer runs the 3D command set for a device: package
// devices/gpu/virgl implements it with virglrenderer in a sandboxed
// helper process. The device checks what it can (sizes, resource IDs
// against its own table, backing entries against guest RAM) and forwards
// the rest; the renderer answers with a response type and body.
type Renderer interface {
	// Capsets returns the capability set IDs, in GET_CAPSET_INFO index
	// order.
	Capsets() []uint32
	// Command runs one control command, header first.
	Command(cmd []byte) (typ uint32, body []byte, err error)
	// AttachBacking gives a 3D resource its backing, checked entries of
	// guest RAM.
	AttachBacking(resource uint32, entries []virtio.Buffer) (typ uint32, body []byte, err error)
	// ReadScanout returns rectangle (x, y, width, height) of a 3D
	// resource, rows of width*4 bytes in its format: what the display
	// shows when the guest puts a 3D resource on the scanout. The slice
	// is the renderer's until the next call.
	ReadScanout(resource, x, y, width, height uint32) ([]byte, error)
	// Close stops the renderer.
	Close() error
}

// resource3D is what the device knows of a 3D resource: enough to check
// a scanout of it and to show it.
type resource3D struct {
	format, width, height uint32
}

// maxSubmitBytes bounds one SUBMIT_3D command buffer; Mesa's virgl
// driver flushes at 256 KiB.
const maxSubmitBytes = virgl.MaxSubmitBytes

// uses3D tells whether a control command goes to the renderer (d.mu
// held): the 3D commands, capsets, and the resource commands that name a
// 3D resource.
func (d *Device) uses3D(cmd []byte) bool {
	if d.renderer == nil {
		return false
	}
	switch h := decodeHeader(cmd); h.Type {
	case cmdGetCapsetInfo, cmdGetCapset:
		return true
	case cmdResourceUnref, cmdResourceAttachBacking, cmdResourceDetachBacking:
		return len(cmd) >= headerSize+4 && d.res3D[le32(cmd[headerSize:])] != nil
	case cmdResourceFlush:
		return len(cmd) >= flushCommandSize && d.res3D[le32(cmd[headerSize+rectSize:])] != nil
	case cmdSetScanout:
		return len(cmd) >= scanoutCommandSize && d.res3D[le32(cmd[headerSize+rectSize+4:])] != nil
	default:
		return h.Type >= virgl.CmdCtxCreate && h.Type <= virgl.CmdSubmit3D
	}
}

// command3D runs a command through the renderer, the worker's own call
// (d.mu held only for the device's tables, never across the renderer's
// work, so a screenshot need not wait for a frame to render).
func (d *Device) command3D(mem virtio.Memory, cmd []byte) []byte {
	h := decodeHeader(cmd)
	status := func(typ uint32) []byte { return response(h, typ, headerSize) }
	var (
		typ  uint32
		body []byte
		err  error
	)
	switch h.Type {
	case virgl.CmdResourceCreate3D:
		if len(cmd) < virgl.Create3DSize {
			return status(respErrUnspec)
		}
		id := le32(cmd[headerSize:])
		d.mu.Lock()
		taken := id == 0 || d.res3D[id] != nil || d.res.byID[id] != nil
		full := len(d.res3D)+len(d.res.byID) >= d.limits.MaxResources
		d.mu.Unlock()
		if taken {
			return status(respErrInvalidResourceID)
		}
		if full {
			return status(respErrOutOfMemory)
		}
		if typ, body, err = d.renderer.Command(cmd); err == nil && typ == respOKNoData {
			b := cmd[headerSize:]
			d.mu.Lock()
			d.res3D[id] = &resource3D{format: le32(b[8:]), width: le32(b[16:]), height: le32(b[20:])}
			d.mu.Unlock()
		}
	case cmdResourceAttachBacking:
		if len(cmd) < attachCommandSize {
			return status(respErrUnspec)
		}
		entries, resp := d.backingList(cmd)
		if resp == respOKNoData {
			_, _, resp = checkBacking(mem, entries, d.limits.MaxBackingEntries)
		}
		if resp != respOKNoData {
			return status(resp)
		}
		typ, body, err = d.renderer.AttachBacking(le32(cmd[headerSize:]), entries)
	case cmdResourceUnref:
		id := le32(cmd[headerSize:])
		typ, body, err = d.renderer.Command(cmd)
		// Gone from the table whatever the renderer says: the guest
		// dropped it, and a dead renderer holds nothing.
		d.mu.Lock()
		delete(d.res3D, id)
		if d.scanout.resourceID == id {
			d.scanout, d.shown3D = scanout{}, nil
			d.nextFrameLocked()
		}
		d.mu.Unlock()
	case virgl.CmdCtxCreate, virgl.CmdCtxDestroy:
		typ, body, err = d.renderer.Command(cmd)
		d.mu.Lock()
		if h.Type == virgl.CmdCtxDestroy {
			delete(d.contexts, h.CtxID)
		} else if err == nil && typ == respOKNoData {
			d.contexts[h.CtxID] = true
		}
		d.mu.Unlock()
	case cmdSetScanout:
		b := cmd[headerSize:]
		return status(d.setScanout3D(decodeRect(b), le32(b[rectSize:]), le32(b[rectSize+4:])))
	case cmdResourceFlush:
		b := cmd[headerSize:]
		typ, err = d.flush3D(decodeRect(b), le32(b[rectSize:]))
	case virgl.CmdSubmit3D:
		if len(cmd) < virgl.SubmitHeaderSize {
			return status(respErrUnspec)
		}
		if size := le32(cmd[headerSize:]); size > maxSubmitBytes || uint64(size) > uint64(len(cmd)-virgl.SubmitHeaderSize) {
			return status(respErrInvalidParameter)
		}
		typ, body, err = d.renderer.Command(cmd)
	default:
		typ, body, err = d.renderer.Command(cmd)
	}
	if err != nil {
		d.rendererFailed(err)
		return status(respErrUnspec)
	}
	b := response(h, typ, headerSize+len(body))
	copy(b[headerSize:], body)
	return b
}

// setScanout3D is SET_SCANOUT of a 3D resource: the rectangle must be a
// non-empty part of it no larger than the largest display, in a format
// the display can show. Its pixels arrive with the next flush.
func (d *Device) setScanout3D(rect Rect, scanoutID, id uint32) uint32 {
	if scanoutID != 0 {
		return respErrInvalidScanoutID
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.res3D[id]
	switch {
	case r == nil:
		return respErrInvalidResourceID
	case rect.empty() || !rect.within(r.width, r.height) || rect.Width > MaxWidth || rect.Height > MaxHeight:
		return respErrInvalidParameter
	case formatChannels[r.format] == (channels{}):
		return respErrInvalidParameter
	}
	d.scanout, d.shown3D = scanout{resourceID: id, rect: rect}, nil
	d.nextFrameLocked()
	return respOKNoData
}

// flush3D is RESOURCE_FLUSH of a 3D resource: when it is on the scanout,
// the scanout's rectangle is read back from the renderer into the host's
// copy, a new frame.
func (d *Device) flush3D(rect Rect, id uint32) (uint32, error) {
	d.mu.Lock()
	r := d.res3D[id]
	sc := d.scanout
	d.mu.Unlock()
	switch {
	case r == nil:
		return respErrInvalidResourceID, nil
	case !rect.within(r.width, r.height):
		return respErrInvalidParameter, nil
	case sc.resourceID != id:
		return respOKNoData, nil
	}
	px, err := d.renderer.ReadScanout(id, sc.rect.X, sc.rect.Y, sc.rect.Width, sc.rect.Height)
	if err != nil {
		if errors.Is(err, virgl.ErrGone) {
			return 0, err
		}
		return respErrInvalidParameter, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.scanout != sc {
		return respOKNoData, nil // the scanout changed meanwhile
	}
	shown := d.shown3D
	if shown == nil || uint64(len(shown.pixels)) != uint64(len(px)) {
		shown = &resource{id: id, pixels: make([]byte, len(px))}
	}
	shown.format, shown.width, shown.height = r.format, sc.rect.Width, sc.rect.Height
	copy(shown.pixels, px)
	d.shown3D = shown
	d.stats.Frames++
	d.nextFrameLocked()
	return respOKNoData, nil
}

// screenshot3D is what a 3D scanout shows (d.mu held): its last flush,
// or black before the first.
func (d *Device) screenshot3D() *image.RGBA {
	rect := d.scanout.rect
	if d.shown3D == nil {
		img := image.NewRGBA(image.Rect(0, 0, int(rect.Width), int(rect.Height)))
		for i := 3; i < len(img.Pix); i += 4 {
			img.Pix[i] = 0xff
		}
		return img
	}
	return screenshot(d.shown3D, Rect{Width: rect.Width, Height: rect.Height})
}

// rendererFailed logs the renderer's end once: from then on every 3D
// command is answered with an error, and the guest's GPU is broken while
// the machine runs on.
func (d *Device) rendererFailed(err error) {
	d.mu.Lock()
	first := !d.rendererDown
	d.rendererDown = true
	d.mu.Unlock()
	if first {
		slog.Warn("virtio-gpu: 3D renderer failed; the guest's 3D commands fail from now on", "err", err)
	}
}

// reset3D forgets the guest's 3D resources and contexts in the renderer,
// as a device reset must (the worker is stopped).
func (d *Device) reset3D() {
	if d.renderer == nil {
		return
	}
	d.mu.Lock()
	resources, contexts := d.res3D, d.contexts
	d.res3D, d.contexts = map[uint32]*resource3D{}, map[uint32]bool{}
	down := d.rendererDown
	d.mu.Unlock()
	if down {
		return
	}
	for id := range resources {
		if _, _, err := d.renderer.Command(idCommand(cmdResourceUnref, 0, id)); err != nil {
			d.rendererFailed(err)
			return
		}
	}
	for ctx := range contexts {
		if _, _, err := d.renderer.Command(idCommand(virgl.CmdCtxDestroy, ctx, 0)); err != nil {
			d.rendererFailed(err)
			return
		}
	}
}

// idCommand is a command with a header and one le32 ID (and padding).
func idCommand(typ, ctx, id uint32) []byte {
	b := response(header{}, typ, headerSize+8)
	binary.LittleEndian.PutUint32(b[16:], ctx)
	binary.LittleEndian.PutUint32(b[headerSize:], id)
	return b
}

// Close stops the worker and the renderer, if the device has one.
func (d *Device) Close() {
	d.Lifecycle.Reset()
	if d.renderer != nil {
		d.renderer.Close()
	}
}

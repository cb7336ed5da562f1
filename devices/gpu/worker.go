package gpu

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"

	"github.com/smolvm/smol/devices/gpu/virgl"
	"github.com/smolvm/smol/virtio"
)

// maxCommandBytes bounds how much of a chain's readable part is read: the
// largest command is ATTACH_BACKING with MaxBackingEntries entries.
func (d *Device) maxCommandBytes() uint64 {
	n := attachCommandSize + uint64(d.limits.MaxBackingEntries)*memEntrySize
	if d.renderer != nil {
		n = max(n, virgl.SubmitHeaderSize+maxSubmitBytes)
	}
	return n
}

// run is the worker: it serves both queues on one goroutine, so commands
// from the two queues never race for the device's state, and cursor
// updates are cheap enough not to wait behind the control queue for long.
func (d *Device) run(life *virtio.Worker) {
	for {
		switch life.Next(life.Wake(controlQueue), life.Wake(cursorQueue), nil) {
		case -1:
			return
		case 0:
			d.serve(life, controlQueue)
		case 1:
			d.serve(life, cursorQueue)
		}
	}
}

// serve completes every available chain of queue q, or stops early when
// the device is reset or paused.
func (d *Device) serve(life *virtio.Worker, q int) {
	queue := life.Queues[q]
	for !life.Interrupted() {
		c, err := queue.Pop()
		if err != nil {
			slog.Debug("virtio-gpu: skipping malformed chain", "queue", q, "err", err)
			if errors.Is(err, virtio.ErrMalformed) {
				continue
			}
			return
		}
		if c == nil {
			return
		}
		written := d.handle(life.Mem, c, q)
		if err := queue.Complete(c, written, life.Interrupt, q); err != nil {
			slog.Warn("virtio-gpu: complete", "queue", q, "head", c.Head, "err", err)
			return
		}
	}
}

// handle runs one command and writes its response; it returns the bytes
// written. The command is copied out of guest memory first, so the guest
// changing it meanwhile changes nothing.
func (d *Device) handle(mem virtio.Memory, c *virtio.Chain, q int) uint32 {
	n := min(c.ReadableLen(), d.maxCommandBytes())
	cmd := make([]byte, n)
	if _, err := io.ReadFull(c.NewReader(), cmd); err != nil {
		return 0
	}
	var resp []byte
	d.mu.Lock()
	d.stats.Commands++
	if len(cmd) < headerSize {
		resp = response(header{}, respErrUnspec, headerSize)
	} else if q == cursorQueue {
		d.cursorCommand(cmd)
	} else {
		resp = d.control(mem, cmd)
	}
	if resp != nil && le32(resp) >= respErrUnspec {
		d.stats.Errors++
	}
	d.mu.Unlock()
	if resp == nil || c.WritableLen() < uint64(len(resp)) {
		// The cursor queue has no responses; a driver that left no room
		// for one gets none.
		return 0
	}
	w := c.NewWriter()
	if _, err := w.Write(resp); err != nil {
		return 0
	}
	return w.Written()
}

// control routes a control-queue command (d.mu held): to the renderer
// (command3D, which takes d.mu itself, so it is released meanwhile) or to
// the 2D command set.
func (d *Device) control(mem virtio.Memory, cmd []byte) []byte {
	if !d.uses3D(cmd) {
		return d.controlCommand(mem, cmd)
	}
	d.mu.Unlock()
	defer d.mu.Lock()
	return d.command3D(mem, cmd)
}

// controlCommand runs one control-queue command (d.mu held) and returns
// the response; mem is the guest memory of the activation serving it.
func (d *Device) controlCommand(mem virtio.Memory, cmd []byte) []byte {
	h := decodeHeader(cmd)
	status := func(typ uint32) []byte { return response(h, typ, headerSize) }
	need := func(size int) bool { return len(cmd) >= size }
	switch h.Type {
	case cmdGetDisplayInfo:
		return d.displayInfo(h)
	case cmdGetEDID:
		if !need(edidCommandSize) {
			return status(respErrUnspec)
		}
		return d.edidResponse(h, le32(cmd[headerSize:]))
	case cmdResourceCreate2D:
		if !need(createCommandSize) {
			return status(respErrUnspec)
		}
		b := cmd[headerSize:]
		if d.res3D[le32(b)] != nil {
			return status(respErrInvalidResourceID)
		}
		return status(d.res.create(le32(b[0:]), le32(b[4:]), le32(b[8:]), le32(b[12:])))
	case cmdResourceUnref:
		if !need(unrefCommandSize) {
			return status(respErrUnspec)
		}
		id := le32(cmd[headerSize:])
		typ := d.res.unref(id)
		if typ == respOKNoData && d.scanout.resourceID == id {
			d.scanout = scanout{}
			d.nextFrameLocked()
		}
		return status(typ)
	case cmdSetScanout:
		if !need(scanoutCommandSize) {
			return status(respErrUnspec)
		}
		b := cmd[headerSize:]
		return status(d.setScanout(decodeRect(b), le32(b[rectSize:]), le32(b[rectSize+4:])))
	case cmdResourceFlush:
		if !need(flushCommandSize) {
			return status(respErrUnspec)
		}
		b := cmd[headerSize:]
		return status(d.flush(decodeRect(b), le32(b[rectSize:])))
	case cmdTransferToHost2D:
		if !need(transferCommandSize) {
			return status(respErrUnspec)
		}
		b := cmd[headerSize:]
		return status(d.res.transfer(mem, le32(b[rectSize+8:]), decodeRect(b), le64(b[rectSize:])))
	case cmdResourceAttachBacking:
		if !need(attachCommandSize) {
			return status(respErrUnspec)
		}
		return status(d.attach(mem, cmd))
	case cmdResourceDetachBacking:
		if !need(detachCommandSize) {
			return status(respErrUnspec)
		}
		return status(d.res.detach(le32(cmd[headerSize:])))
	case cmdGetCapsetInfo, cmdGetCapset:
		// Without a renderer num_capsets is 0: every capset index is out
		// of range.
		return status(respErrInvalidParameter)
	default:
		// 3D commands without a renderer, and blob and UUID commands,
		// need features this device does not offer; anything else is not
		// a command.
		return status(respErrUnspec)
	}
}

func (d *Device) displayInfo(h header) []byte {
	b := response(h, respOKDisplayInfo, displayInfoSize)
	mode := b[headerSize:]
	putRect(mode, Rect{Width: d.width, Height: d.height})
	binary.LittleEndian.PutUint32(mode[rectSize:], 1) // enabled
	return b
}

func (d *Device) edidResponse(h header, scanoutID uint32) []byte {
	if scanoutID != 0 {
		return response(h, respErrInvalidScanoutID, headerSize)
	}
	b := response(h, respOKEDID, edidResponseSize)
	binary.LittleEndian.PutUint32(b[headerSize:], uint32(len(d.edid)))
	copy(b[headerSize+8:], d.edid)
	return b
}

// setScanout is SET_SCANOUT: resource 0 turns the display off; otherwise
// the rectangle must be a non-empty part of the resource.
func (d *Device) setScanout(rect Rect, scanoutID, resourceID uint32) uint32 {
	if scanoutID != 0 {
		return respErrInvalidScanoutID
	}
	if resourceID == 0 {
		d.scanout, d.shown3D = scanout{}, nil
		d.nextFrameLocked()
		return respOKNoData
	}
	r := d.res.byID[resourceID]
	switch {
	case r == nil:
		return respErrInvalidResourceID
	case rect.empty() || !rect.within(r.width, r.height):
		return respErrInvalidParameter
	}
	d.scanout, d.shown3D = scanout{resourceID: resourceID, rect: rect}, nil
	d.nextFrameLocked()
	return respOKNoData
}

// flush is RESOURCE_FLUSH: a new frame if the resource is on the display.
func (d *Device) flush(rect Rect, resourceID uint32) uint32 {
	r := d.res.byID[resourceID]
	switch {
	case r == nil:
		return respErrInvalidResourceID
	case !rect.within(r.width, r.height):
		return respErrInvalidParameter
	}
	if d.scanout.resourceID == resourceID {
		d.stats.Frames++
		d.nextFrameLocked()
	}
	return respOKNoData
}

// attach decodes ATTACH_BACKING's entry list, which follows the command
// in the same readable stream.
func (d *Device) attach(mem virtio.Memory, cmd []byte) uint32 {
	id := le32(cmd[headerSize:])
	entries, resp := d.backingList(cmd)
	if resp != respOKNoData {
		return resp
	}
	return d.res.attach(mem, id, entries)
}

// backingList decodes ATTACH_BACKING's entries (the caller checked the
// command's fixed part is there).
func (d *Device) backingList(cmd []byte) ([]virtio.Buffer, uint32) {
	count := le32(cmd[headerSize+4:])
	if uint64(count) > uint64(d.limits.MaxBackingEntries) {
		return nil, respErrOutOfMemory
	}
	list := cmd[attachCommandSize:]
	if uint64(len(list)) < uint64(count)*memEntrySize {
		return nil, respErrUnspec
	}
	entries := make([]virtio.Buffer, count)
	for i := range entries {
		e := list[i*memEntrySize:]
		entries[i] = virtio.Buffer{Addr: le64(e[0:]), Len: le32(e[8:])}
	}
	return entries, respOKNoData
}

// cursorCommand runs UPDATE_CURSOR or MOVE_CURSOR (d.mu held). The cursor
// queue has no responses: a bad command is dropped.
func (d *Device) cursorCommand(cmd []byte) {
	if len(cmd) < cursorCommandSize {
		d.stats.Errors++
		return
	}
	h := decodeHeader(cmd)
	b := cmd[headerSize:]
	scanoutID, x, y := le32(b[0:]), le32(b[4:]), le32(b[8:])
	resourceID, hotX, hotY := le32(b[16:]), le32(b[20:]), le32(b[24:])
	if scanoutID != 0 {
		d.stats.Errors++
		return
	}
	switch h.Type {
	case cmdMoveCursor:
		d.cursor.X, d.cursor.Y = x, y
	case cmdUpdateCursor:
		if resourceID != 0 && d.res.byID[resourceID] == nil {
			d.stats.Errors++
			return
		}
		d.cursor.X, d.cursor.Y = x, y
		d.cursor.HotX, d.cursor.HotY = hotX, hotY
		d.cursor.Visible = resourceID != 0
	default:
		d.stats.Errors++
		return
	}
	d.cursor.Updates++
}

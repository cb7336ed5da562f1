package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"image"
	"sync"

	"github.com/smolvm/smol/virtio"
)

// Queue sizes: the control queue carries one command per chain; the
// cursor queue sees a few per pointer movement.
const (
	ControlQueueSize = 256
	CursorQueueSize  = 16
)

// Config describes a display device.
type Config struct {
	// Width and Height are the display's size in pixels (CheckSize);
	// zero means DefaultWidth x DefaultHeight.
	Width, Height uint32
	// Limits bound the host memory the guest can use; the zero value
	// means DefaultLimits.
	Limits Limits
	// Renderer, when set, gives the guest 3D (VIRTIO_GPU_F_VIRGL): the
	// device forwards 3D commands to it and closes it with the device.
	Renderer Renderer
}

// Device is a virtio-gpu device with one scanout and the 2D command set.
//
// Its state is written by the worker goroutine while it serves commands
// and read by host callers (Screenshot, Cursor, WaitFrame); mu guards it.
type Device struct {
	*virtio.Lifecycle // Notify, Reset, Pause, Resume

	width, height uint32
	edid          []byte
	limits        Limits

	mu        sync.Mutex
	res       resources
	scanout   scanout
	cursor    Cursor
	frame     uint64        // RESOURCE_FLUSHes that touched the scanout
	frameWake chan struct{} // closed and replaced on every frame
	stats     Stats

	// 3D, with a renderer: the resources and contexts the guest made
	// there (resource IDs are one namespace with the 2D table's), and
	// whether the renderer failed.
	renderer     Renderer
	res3D        map[uint32]*resource3D
	contexts     map[uint32]bool
	rendererDown bool
	// shown3D is the host's copy of what a 3D resource on the scanout
	// showed at its last flush (read back from the renderer); nil while
	// the scanout is 2D or not flushed yet.
	shown3D *resource
}

// Stats count the device's work since it was created.
type Stats struct {
	Commands uint64 // control and cursor commands served
	Errors   uint64 // commands answered with an error
	Frames   uint64 // flushes of the resource on the scanout
}

var _ virtio.Device = (*Device)(nil)

// New returns an inactive display device.
func New(cfg Config) (*Device, error) {
	if cfg.Width == 0 && cfg.Height == 0 {
		cfg.Width, cfg.Height = DefaultWidth, DefaultHeight
	}
	if err := CheckSize(cfg.Width, cfg.Height); err != nil {
		return nil, err
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	return &Device{
		Lifecycle: virtio.NewLifecycle("virtio-gpu", 2),
		width:     cfg.Width,
		height:    cfg.Height,
		edid:      edid(cfg.Width, cfg.Height),
		limits:    cfg.Limits,
		res:       newResources(cfg.Limits),
		frameWake: make(chan struct{}),
		renderer:  cfg.Renderer,
		res3D:     map[uint32]*resource3D{},
		contexts:  map[uint32]bool{},
	}, nil
}

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return virtio.IDGPU }

// Features implements virtio.Device: EDID, and 3D (virgl) with a
// renderer.
func (d *Device) Features() uint64 {
	if d.renderer != nil {
		return featureEDID | featureVirgl
	}
	return featureEDID
}

// QueueSizes implements virtio.Device: control and cursor queues.
func (d *Device) QueueSizes() []uint16 { return []uint16{ControlQueueSize, CursorQueueSize} }

// ReadConfig implements virtio.Device. No display events are ever
// pending: the display's size is fixed for the machine's life.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	var cfg [configSize]byte
	binary.LittleEndian.PutUint32(cfg[configNumScanouts:], 1)
	if d.renderer != nil {
		binary.LittleEndian.PutUint32(cfg[configNumCapsets:], uint32(len(d.renderer.Capsets())))
	}
	clear(data)
	if offset < configSize {
		copy(data, cfg[offset:])
	}
}

// WriteConfig implements virtio.Device: only events_clear is writable,
// and there is never an event to clear.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Size returns the display's size.
func (d *Device) Size() (width, height uint32) { return d.width, d.height }

// Activate implements virtio.Device: it starts the worker on both queues.
func (d *Device) Activate(env virtio.Env) error {
	if len(env.Queues) != 2 || env.Queues[controlQueue] == nil || env.Queues[cursorQueue] == nil {
		return errors.New("virtio-gpu: activate: the control and cursor queues must both be enabled")
	}
	return d.Lifecycle.Activate(env, d.run)
}

// Reset stops the worker and forgets every resource and the scanout, as
// a device reset does: the driver starts over.
func (d *Device) Reset() {
	d.Lifecycle.Reset()
	d.mu.Lock()
	d.res = newResources(d.limits)
	d.scanout = scanout{}
	d.cursor = Cursor{Updates: d.cursor.Updates}
	d.shown3D = nil
	d.nextFrameLocked()
	d.mu.Unlock()
	d.reset3D()
}

// Screenshot returns what the display shows now: the scanout's rectangle
// of its resource as the guest last transferred it.
func (d *Device) Screenshot() (*image.RGBA, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.res3D[d.scanout.resourceID] != nil {
		return d.screenshot3D(), nil
	}
	r := d.res.byID[d.scanout.resourceID]
	if r == nil {
		return nil, ErrNoScanout
	}
	return screenshot(r, d.scanout.rect), nil
}

// Cursor returns the pointer's state.
func (d *Device) Cursor() Cursor {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cursor
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Frame returns the number of frames shown so far: it grows with every
// flush of the scanout's resource and with every scanout change.
func (d *Device) Frame() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.frame
}

// WaitFrame waits until the frame number is above after, for a viewer
// that redraws only when the guest did, and returns the new number.
func (d *Device) WaitFrame(ctx context.Context, after uint64) (uint64, error) {
	for {
		d.mu.Lock()
		frame, wake := d.frame, d.frameWake
		d.mu.Unlock()
		if frame > after {
			return frame, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return frame, ctx.Err()
		}
	}
}

func (d *Device) nextFrameLocked() {
	d.frame++
	close(d.frameWake)
	d.frameWake = make(chan struct{})
}

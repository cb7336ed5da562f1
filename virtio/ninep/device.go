package ninep

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hugelgupf/p9/p9"
	"github.com/smolvm/smol/virtio"
)

// Device type and feature bits (virtio 1.2, section 5.3).
const (
	ID              virtio.DeviceID = 9
	featureMountTag                 = 1 << 0
)

// QueueSize is the size of the request queue.
const QueueSize = 128

// MaxMessage bounds one 9P message either way (the guest's msize may not
// be larger: the server answers Tversion with at most this).
const MaxMessage = 1 << 20

// MaxTag is the longest mount tag (the guest mounts the tree by it).
const MaxTag = 64

// Device is a virtio-9p device serving one host directory (9P2000.L).
type Device struct {
	*virtio.Lifecycle
	tag  string
	tree *tree
}

var _ virtio.Device = (*Device)(nil)

// New serves the host directory dir to the guest, which mounts it by tag
// (mount -t 9p -o trans=virtio TAG DIR); readOnly refuses every change on
// the host side.
func New(dir, tag string, readOnly bool) (*Device, error) {
	if tag == "" || len(tag) > MaxTag {
		return nil, fmt.Errorf("virtio-9p: a mount tag of 1 to %d bytes, not %q", MaxTag, tag)
	}
	t, err := newTree(dir, readOnly)
	if err != nil {
		return nil, err
	}
	return &Device{Lifecycle: virtio.NewLifecycle("virtio-9p", 1), tag: tag, tree: t}, nil
}

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return ID }

// Tag is the mount tag.
func (d *Device) Tag() string { return d.tag }

// Features implements virtio.Device.
func (d *Device) Features() uint64 { return featureMountTag }

// QueueSizes implements virtio.Device.
func (d *Device) QueueSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig implements virtio.Device: le16 tag length, then the tag.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	cfg := binary.LittleEndian.AppendUint16(nil, uint16(len(d.tag)))
	cfg = append(cfg, d.tag...)
	for i := range data {
		data[i] = 0
		if o := offset + uint64(i); o < uint64(len(cfg)) {
			data[i] = cfg[o]
		}
	}
}

// WriteConfig implements virtio.Device: the config space is read-only.
func (d *Device) WriteConfig(uint64, []byte) {}

// Close releases the served directory.
func (d *Device) Close() error {
	d.Reset()
	return d.tree.root.Close()
}

// Activate implements virtio.Device: a 9P server session for this
// activation (a reset drops every fid the guest held), fed by the worker.
func (d *Device) Activate(env virtio.Env) error {
	if len(env.Queues) != 1 || env.Queues[0] == nil {
		return errors.New("virtio-9p: activate: the request queue is not enabled")
	}
	b := newBridge()
	srv := p9.NewServer(d.tree)
	go srv.Handle(b, b)
	return d.Lifecycle.Activate(env, func(life *virtio.Worker) {
		defer b.close()
		b.serve(life)
	})
}

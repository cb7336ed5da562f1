package rng

import (
	"crypto/rand"
	"errors"

	"github.com/smolvm/smol/virtio"
)

// QueueSize is the size of the request queue.
const QueueSize = 256

// MaxRequestBytes bounds how much entropy one request gets: the guest asks
// for small amounts (Linux's hwrng reads at most a page), and the cap keeps
// one huge buffer from occupying the worker. The device reports how many
// bytes it wrote, so a capped request is still correct.
const MaxRequestBytes = 64 << 10

// Device is a virtio-rng device. It has no configuration space and no
// feature bits.
type Device struct {
	*virtio.Lifecycle // Notify, Reset, Pause, Resume
}

var _ virtio.Device = (*Device)(nil)

// New returns an inactive entropy device.
func New() *Device { return &Device{virtio.NewLifecycle("virtio-rng", 1)} }

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return virtio.IDRNG }

// Features implements virtio.Device: the entropy device defines none.
func (d *Device) Features() uint64 { return 0 }

// QueueSizes implements virtio.Device: one request queue.
func (d *Device) QueueSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig implements virtio.Device: there is no config space.
func (d *Device) ReadConfig(offset uint64, data []byte) { clear(data) }

// WriteConfig implements virtio.Device: there is no config space.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate implements virtio.Device: it starts the worker on the request
// queue.
func (d *Device) Activate(env virtio.Env) error {
	if len(env.Queues) != 1 || env.Queues[0] == nil {
		return errors.New("virtio-rng: activate: the request queue is not enabled")
	}
	w := &worker{entropy: rand.Reader}
	return d.Lifecycle.Activate(env, w.run)
}

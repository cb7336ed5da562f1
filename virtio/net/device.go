package net

import (
	"errors"
	"fmt"
	"sync"

	"github.com/smolvm/smol/virtio"
)

// Options describe the NIC the guest sees.
type Options struct {
	// MAC is the guest's address: unicast and not all zeros
	// (netdev/tap.ParseMAC and MACFromName produce such addresses).
	MAC [6]byte
	// MTU, when not 0, is offered to the driver (VIRTIO_NET_F_MTU) as the
	// interface MTU, in [68, 65535]; 0 leaves the guest's default (1500).
	MTU uint16
}

// minMTU is the smallest MTU IPv4 allows (RFC 791).
const minMTU = 68

// Device is a virtio-net device between a driver and a Backend. The
// guest-facing methods follow virtio.Device's threading rules; frames move
// on one worker goroutine between Activate and Reset, helped by a goroutine
// that waits for the backend to become readable.
type Device struct {
	backend Backend
	stats   stats

	*virtio.Lifecycle // the worker: Notify, Pause, Resume

	mu         sync.Mutex // guards everything below
	mac        [6]byte
	mtu        uint16
	linkUp     bool
	features   uint64 // offered
	negotiated uint64
	config     [configSize]byte
	irq        virtio.Interrupter // while active, for link changes
}

var _ virtio.Device = (*Device)(nil)

// New returns a network device for backend with the link up. The device
// owns the backend from then on: Close closes it.
func New(backend Backend, opts Options) (*Device, error) {
	if backend == nil {
		return nil, errors.New("virtio-net: nil backend")
	}
	if err := validMAC(opts.MAC); err != nil {
		return nil, fmt.Errorf("virtio-net: %w", err)
	}
	features := uint64(FeatureMAC|FeatureStatus|FeatureMrgRxBuf) | backend.SupportedOffloads()&OffloadFeatures
	if opts.MTU != 0 {
		if opts.MTU < minMTU {
			return nil, fmt.Errorf("virtio-net: MTU %d is below %d", opts.MTU, minMTU)
		}
		features |= FeatureMTU
	}
	return &Device{
		backend:   backend,
		Lifecycle: virtio.NewLifecycle("virtio-net", 2),
		mac:       opts.MAC,
		mtu:       opts.MTU,
		linkUp:    true,
		features:  features,
		config:    buildConfig(opts.MAC, true, opts.MTU),
	}, nil
}

func validMAC(mac [6]byte) error {
	switch {
	case mac == [6]byte{}:
		return errors.New("MAC address is all zeros")
	case mac[0]&1 != 0:
		return fmt.Errorf("MAC address %x is multicast", mac)
	}
	return nil
}

// Backend returns the host side of the device.
func (d *Device) Backend() Backend { return d.backend }

// MAC returns the guest's MAC address.
func (d *Device) MAC() [6]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mac
}

// ID is virtio.IDNet.
func (d *Device) ID() virtio.DeviceID { return virtio.IDNet }

// Features are the virtio-net feature bits offered.
func (d *Device) Features() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.features
}

// QueueSizes: one receive and one transmit queue (no control queue, no
// multiqueue).
func (d *Device) QueueSizes() []uint16 { return []uint16{QueueSize, QueueSize} }

// ReadConfig reads struct virtio_net_config; bytes past mtu read as 0.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	clear(data)
	d.mu.Lock()
	defer d.mu.Unlock()
	if offset < configSize {
		copy(data, d.config[offset:])
	}
}

// WriteConfig ignores writes: in virtio 1.x every field is read-only (only
// legacy drivers wrote the MAC).
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// SetLinkUp changes the link status the guest sees and, while the device
// runs, raises a configuration-change interrupt so the driver notices (its
// carrier goes up or down).
func (d *Device) SetLinkUp(up bool) error {
	d.mu.Lock()
	if d.linkUp == up {
		d.mu.Unlock()
		return nil
	}
	d.linkUp = up
	d.config = buildConfig(d.mac, up, d.mtu)
	irq := d.irq
	d.mu.Unlock()
	if irq == nil {
		return nil
	}
	if err := irq.SignalConfigChange(); err != nil {
		return fmt.Errorf("virtio-net: signal link change: %w", err)
	}
	return nil
}

// Activate applies the negotiated offloads to the backend and starts the
// worker on both queues.
func (d *Device) Activate(env virtio.Env) error {
	if env.Mem == nil || env.Interrupt == nil {
		return errors.New("virtio-net: activate without guest memory or interrupter")
	}
	if len(env.Queues) != 2 {
		return fmt.Errorf("virtio-net: activate with %d queues, want 2", len(env.Queues))
	}
	for i, q := range env.Queues {
		if q == nil || !q.Ready() {
			return fmt.Errorf("virtio-net: activate: queue %d is not set up", i)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Active() {
		return fmt.Errorf("virtio-net: activate: %w", virtio.ErrAlreadyActive)
	}
	if err := d.backend.SetOffloads(env.Features & OffloadFeatures); err != nil {
		return fmt.Errorf("virtio-net: activate: %w", err)
	}
	w := newWorker(env, d.backend, &d.stats)
	if env.Features&FeatureMTU != 0 {
		w.mtu = d.mtu // the driver keeps its frames to it, so transmit can hold it to that
	}
	if err := d.Lifecycle.Activate(env, w.run); err != nil {
		return err
	}
	d.negotiated = env.Features
	d.irq = env.Interrupt
	return nil
}

// Reset stops the worker and its helper and waits for them. A frame in
// the middle of delivery is dropped; the counters keep counting and the
// device can be activated again.
func (d *Device) Reset() {
	d.Lifecycle.Reset()
	d.mu.Lock()
	d.irq = nil
	d.mu.Unlock()
}

// Close stops the device and closes its backend (a TAP then disappears).
func (d *Device) Close() error {
	d.Reset()
	return d.backend.Close()
}

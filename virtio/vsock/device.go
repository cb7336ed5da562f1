package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/smolvm/smol/virtio"
)

// FeatureStream is VIRTIO_VSOCK_F_STREAM, the only device feature offered.
const FeatureStream = 1 << 0

// ErrNotActive reports a request that needs the guest driver running.
var ErrNotActive = errors.New("vsock: device not active")

// Device is a virtio-vsock device bridging the guest to host Unix sockets.
// Create it with New; the transport drives it through virtio.Device; the
// VMM calls Close when the VM is gone.
//
// Threading: Notify never blocks. Activate, Reset, Restore and
// SendTransportReset are serialised by mu; the queue work runs on one
// worker goroutine per activation.
type Device struct {
	cfg      Config // CID is authoritative in cid
	cid      atomic.Uint64
	listener *listener
	// Lifecycle runs the worker; every queue shares one wake-up (index 0)
	// because the worker looks at all three each time.
	*virtio.Lifecycle

	mu sync.Mutex
	w  *worker // nil while inactive
	// resetOnActivate: a restored guest's connections are gone, so the
	// next activation starts by telling it (TRANSPORT_RESET).
	resetOnActivate bool
	closed          bool
}

var _ virtio.Device = (*Device)(nil)

// New creates a vsock device and starts listening on cfg.UDSPath for host
// programs. Errors for a bad CID or socket path wrap the Err* values of
// this package.
func New(cfg Config) (*Device, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	l, err := newListener(cfg.UDSPath)
	if err != nil {
		return nil, err
	}
	d := &Device{cfg: cfg, listener: l, Lifecycle: virtio.NewLifecycle("vsock", 1)}
	d.cid.Store(cfg.CID)
	return d, nil
}

// CID returns the guest's context ID. It is atomic rather than under mu
// because ReadConfig runs on vCPU threads, which must not wait for a Reset.
func (d *Device) CID() uint64 { return d.cid.Load() }

// UDSPath returns the Unix socket host programs connect to.
func (d *Device) UDSPath() string { return d.cfg.UDSPath }

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return virtio.IDVsock }

// Features implements virtio.Device.
func (d *Device) Features() uint64 { return FeatureStream }

// QueueSizes implements virtio.Device: rx, tx and event queues.
func (d *Device) QueueSizes() []uint16 { return []uint16{queueSize, queueSize, queueSize} }

// ReadConfig implements virtio.Device. The configuration space is one
// little-endian u64, guest_cid.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	var cfg [8]byte
	binary.LittleEndian.PutUint64(cfg[:], d.CID())
	for i := range data {
		data[i] = 0
		if off := offset + uint64(i); off >= offset && off < uint64(len(cfg)) {
			data[i] = cfg[off]
		}
	}
}

// WriteConfig implements virtio.Device; the configuration space is
// read-only, so writes are ignored.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate implements virtio.Device: it starts the worker for the queues the
// driver set up. The rx and tx queues are required; without an event queue
// transport resets cannot be announced.
func (d *Device) Activate(env virtio.Env) error {
	if len(env.Queues) < 2 || env.Queues[rxQueue] == nil || env.Queues[txQueue] == nil {
		return fmt.Errorf("vsock: activate: the rx and tx queues are required")
	}
	if env.Interrupt == nil {
		return fmt.Errorf("vsock: activate: no interrupter")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("vsock: activate: device closed")
	}
	if d.w != nil {
		return fmt.Errorf("vsock: activate: %w", virtio.ErrAlreadyActive)
	}
	w := &worker{
		cid:        d.CID(),
		path:       d.cfg.UDSPath,
		irq:        env.Interrupt,
		incoming:   d.listener.incoming,
		resetCalls: make(chan chan struct{}),
	}
	copy(w.queues[:], env.Queues)
	if d.resetOnActivate {
		w.owe()
	}
	if err := d.Lifecycle.Activate(env, w.run); err != nil {
		return err
	}
	d.resetOnActivate = false
	d.w = w
	return nil
}

// Notify implements virtio.Device. Every queue wakes the same worker, which
// looks at all three.
func (d *Device) Notify(queue int) { d.Lifecycle.Notify(0) }

// Reset implements virtio.Device: it stops the worker, which closes every
// host connection and waits for all their goroutines. The listener stays:
// host programs may connect again once the driver is back.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Lifecycle.Reset()
	d.w = nil
}

// SendTransportReset drops every connection and queues
// VIRTIO_VSOCK_EVENT_TRANSPORT_RESET for the guest, which then drops its own
// and re-reads its CID. It is what a restored snapshot needs: the host
// sockets of the old connections do not exist any more. The event reaches
// the guest as soon as it has an event buffer posted.
func (d *Device) SendTransportReset() error {
	d.mu.Lock()
	w := d.w
	stopped := d.Lifecycle.Stopped()
	d.mu.Unlock()
	if w == nil {
		return ErrNotActive
	}
	if w.queues[eventQueue] == nil {
		return fmt.Errorf("vsock: transport reset: the driver set up no event queue")
	}
	reply := make(chan struct{})
	select {
	case w.resetCalls <- reply:
	case <-stopped:
		return ErrNotActive
	}
	<-reply
	d.Notify(eventQueue)
	return nil
}

// Close resets the device and stops listening, removing the socket file.
func (d *Device) Close() error {
	d.Reset()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	if err := d.listener.close(); err != nil {
		return fmt.Errorf("vsock: close listener %s: %w", d.cfg.UDSPath, err)
	}
	return nil
}

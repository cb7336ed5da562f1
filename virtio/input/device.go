package input

import (
	"errors"
	"fmt"
	"sync"

	"github.com/smolvm/smol/virtio"
)

// Queues: events to the guest, status (LEDs) from it.
const (
	eventQueue  = 0
	statusQueue = 1
	QueueSize   = 64
)

// MaxBacklog bounds the events waiting for guest buffers: enough for a
// burst of typing or pointer motion while the guest is busy, small enough
// that a guest which never reads costs the host nothing to speak of.
const MaxBacklog = 4096

// Event is one input event as the guest's evdev reads it.
type Event struct {
	Type  uint16
	Code  uint16
	Value int32
}

// ErrBacklog refuses a batch the backlog has no room for.
var ErrBacklog = errors.New("virtio-input: the guest is not reading its input events")

// Device is a virtio input device of one Kind.
type Device struct {
	*virtio.Lifecycle // Notify, Pause, Resume

	kind Kind
	caps capabilities

	cfgMu          sync.Mutex // the driver's selector (vCPU threads)
	select_, subse uint8

	mu      sync.Mutex
	backlog []Event
	arrived virtio.Wakeup // the host sent events
	counts  Counters
}

// Counters count what the device delivered and refused.
type Counters struct {
	Delivered, Refused uint64 // events
}

var _ virtio.Device = (*Device)(nil)

// New returns an inactive input device.
func New(k Kind) *Device {
	return &Device{
		Lifecycle: virtio.NewLifecycle("virtio-input", 2),
		kind:      k, caps: capabilitiesOf(k),
		arrived: virtio.NewWakeup(),
	}
}

// Kind returns what the device is.
func (d *Device) Kind() Kind { return d.kind }

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return virtio.IDInput }

// Features implements virtio.Device: virtio-input defines none.
func (d *Device) Features() uint64 { return 0 }

// QueueSizes implements virtio.Device.
func (d *Device) QueueSizes() []uint16 { return []uint16{QueueSize, QueueSize} }

// ReadConfig implements virtio.Device: the answer to the selector the
// driver last wrote.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	d.cfgMu.Lock()
	sel, sub := d.select_, d.subse
	d.cfgMu.Unlock()
	var cfg [cfgLen]byte
	cfg[cfgSelect], cfg[cfgSubsel] = sel, sub
	ans := d.caps.answer(sel, sub)
	cfg[cfgSize] = byte(len(ans))
	copy(cfg[cfgUnion:], ans)
	clear(data)
	if offset < cfgLen {
		copy(data, cfg[offset:])
	}
}

// WriteConfig implements virtio.Device: only select and subsel are
// writable.
func (d *Device) WriteConfig(offset uint64, data []byte) {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	for i, b := range data {
		switch offset + uint64(i) {
		case cfgSelect:
			d.select_ = b
		case cfgSubsel:
			d.subse = b
		}
	}
}

// Activate implements virtio.Device.
func (d *Device) Activate(env virtio.Env) error {
	if len(env.Queues) != 2 || env.Queues[eventQueue] == nil {
		return errors.New("virtio-input: activate: the event queue is not enabled")
	}
	return d.Lifecycle.Activate(env, d.run)
}

// Reset stops the worker and drops the backlog: a new driver must not
// get keys pressed for the old one.
func (d *Device) Reset() {
	d.Lifecycle.Reset()
	d.mu.Lock()
	d.backlog = nil
	d.mu.Unlock()
	d.cfgMu.Lock()
	d.select_, d.subse = cfgUnset, 0
	d.cfgMu.Unlock()
}

// Send queues one batch of events for the guest, followed by SYN_REPORT.
// The whole batch is refused (ErrBacklog) if it does not fit.
func (d *Device) Send(events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	for _, e := range events {
		if err := d.check(e); err != nil {
			return err
		}
	}
	d.mu.Lock()
	if len(d.backlog)+len(events)+1 > MaxBacklog {
		d.counts.Refused += uint64(len(events))
		d.mu.Unlock()
		return ErrBacklog
	}
	d.backlog = append(d.backlog, events...)
	d.backlog = append(d.backlog, Event{Type: EvSyn, Code: SynReport})
	d.mu.Unlock()
	d.arrived.Signal()
	return nil
}

// check refuses an event this kind of device does not emit, so the
// guest's view of the device and what it receives agree.
func (d *Device) check(e Event) error {
	codes, ok := d.caps.codes[uint8(e.Type)]
	if e.Type > 0xff || !ok || e.Type == EvRep {
		return fmt.Errorf("virtio-input: %s does not emit events of type %d", d.caps.name, e.Type)
	}
	for _, c := range codes {
		if c == e.Code {
			if max, isAxis := d.caps.absMax[e.Code]; e.Type == EvAbs && isAxis && (e.Value < 0 || uint32(e.Value) > max) {
				return fmt.Errorf("virtio-input: axis %d value %d outside 0-%d", e.Code, e.Value, max)
			}
			return nil
		}
	}
	return fmt.Errorf("virtio-input: %s has no code %d of type %d", d.caps.name, e.Code, e.Type)
}

// Counters returns the device's counters.
func (d *Device) Counters() Counters {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts
}

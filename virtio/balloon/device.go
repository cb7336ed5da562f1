package balloon

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/smolvm/smol/virtio"
)

// Discarder releases the host memory behind a page-aligned range of guest
// RAM; later accesses see zeroes. *memory.Guest implements it.
type Discarder interface {
	Discard(addr, length uint64) error
}

// Config configures a balloon.
type Config struct {
	// Discarder gives discarded guest pages back to the host. It must be
	// the guest memory the device's queues live in.
	Discarder Discarder
	// TargetPages is the initial target (num_pages), in 4 KiB pages.
	TargetPages uint32
}

// Device is a virtio balloon. The guest-facing methods follow
// virtio.Device's threading rules; the queue work runs on one worker
// goroutine between Activate and Reset. The host controls it with
// SetTargetPages or SetTargetBytes and reads it with Actual, Stats,
// RefreshStats and Counters, from any goroutine.
type Device struct {
	discard  Discarder
	counters counters
	stats    *statsBox

	// Lifecycle runs the worker. Balloon traffic is light, so every queue
	// shares one wake-up (index 0) and each wake-up looks at all of them.
	*virtio.Lifecycle

	mu     sync.Mutex // guards everything below
	cfg    config
	worker *worker // nil unless active
	// irq is the interrupter of the latest activation. It is kept after
	// Reset: it is the transport, which counts a config change as a new
	// config generation even while the device is stopped.
	irq virtio.Interrupter
	// restoring is set by Restore until the next Activate, so that the
	// transport's reset between the two keeps the restored state;
	// restoredHead is the stats buffer the snapshot held (-1: none).
	restoring    bool
	restoredHead int
}

var _ virtio.Device = (*Device)(nil)

// New returns an inactive balloon.
func New(cfg Config) (*Device, error) {
	if cfg.Discarder == nil {
		return nil, errors.New("balloon: no Discarder")
	}
	return &Device{
		Lifecycle:    virtio.NewLifecycle("balloon", 1),
		discard:      cfg.Discarder,
		stats:        newStatsBox(),
		cfg:          config{numPages: cfg.TargetPages},
		restoredHead: -1,
	}, nil
}

// ID implements virtio.Device.
func (d *Device) ID() virtio.DeviceID { return virtio.IDBalloon }

// Features implements virtio.Device: statistics, deflate on OOM and free
// page reporting.
func (d *Device) Features() uint64 { return offeredFeatures }

// QueueSizes implements virtio.Device: inflateq, deflateq, statsq and
// reporting_vq, of which the driver enables those its features call for.
func (d *Device) QueueSizes() []uint16 {
	return []uint16{QueueSize, QueueSize, QueueSize, QueueSize}
}

// ReadConfig implements virtio.Device: struct virtio_balloon_config.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	clear(data)
	d.mu.Lock()
	b := d.cfg.bytes()
	d.mu.Unlock()
	if offset < configSize {
		copy(data, b[offset:])
	}
}

// WriteConfig implements virtio.Device: the driver may write actual and
// poison_val; other bytes are read-only and ignored.
func (d *Device) WriteConfig(offset uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg.write(offset, data)
}

// Activate implements virtio.Device: it finds the queues the negotiated
// features call for (see queueLayout) and starts the worker.
func (d *Device) Activate(env virtio.Env) error {
	if env.Mem == nil || env.Interrupt == nil {
		return errors.New("balloon: activate without guest memory or interrupter")
	}
	if len(env.Queues) != NumQueues {
		return fmt.Errorf("balloon: activate with %d queues, want %d", len(env.Queues), NumQueues)
	}
	if env.Queues[inflateQueue] == nil || env.Queues[deflateQueue] == nil {
		return errors.New("balloon: activate: the inflate and deflate queues are not set up")
	}
	statsIndex, reportIndex := queueLayout(env.Features)
	w := &worker{
		mem:         env.Mem,
		discard:     d.discard,
		irq:         env.Interrupt,
		counters:    &d.counters,
		stats:       d.stats,
		inflate:     env.Queues[inflateQueue],
		deflate:     env.Queues[deflateQueue],
		statsIndex:  statsIndex,
		reportIndex: reportIndex,
	}
	if statsIndex >= 0 {
		w.statsQueue = env.Queues[statsIndex]
	}
	if reportIndex >= 0 {
		w.reportQueue = env.Queues[reportIndex]
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.worker != nil {
		return fmt.Errorf("balloon: activate: %w", virtio.ErrAlreadyActive)
	}
	if d.restoring {
		w.held = restoredStatsBuffer(w.statsQueue, d.restoredHead)
		d.restoring, d.restoredHead = false, -1
	}
	if w.held != nil {
		d.stats.setHeld(int(w.held.Head))
	}
	w.statsReq = virtio.NewWakeup()
	if err := d.Lifecycle.Activate(env, w.run); err != nil {
		return err
	}
	d.irq = env.Interrupt
	d.worker = w
	return nil
}

// restoredStatsBuffer returns the stats buffer a snapshot says the device
// held, if the restored queue agrees: exactly one chain taken and not yet
// returned (the balloon returns every other chain at once).
func restoredStatsBuffer(q *virtio.Queue, head int) *virtio.Chain {
	if q == nil || head < 0 || head >= int(q.Size()) {
		return nil
	}
	st := q.State()
	if st.NextAvail-st.NextUsed != 1 {
		return nil
	}
	// The buffer's contents were consumed before the snapshot; returning
	// it needs only its head, and it has no device-writable bytes.
	return &virtio.Chain{Head: uint16(head)}
}

// Notify implements virtio.Device; it never blocks.
func (d *Device) Notify(queue int) {
	if queue >= 0 && queue < NumQueues {
		d.Lifecycle.Notify(0)
	}
}

// Reset implements virtio.Device: it stops the worker and waits for it,
// and forgets what the driver wrote (actual, poison_val), since a new
// driver starts with an empty balloon. The target, the counters and the
// latest statistics stay. A reset between Restore and Activate keeps the
// restored state.
func (d *Device) Reset() {
	d.mu.Lock()
	w := d.worker
	d.worker = nil
	if !d.restoring {
		d.cfg.actual, d.cfg.poisonVal = 0, 0
	}
	d.mu.Unlock()
	d.Lifecycle.Reset()
	if w != nil {
		d.stats.setHeld(-1)
	}
}

// SetTargetPages sets how many 4 KiB pages the host wants in the balloon
// and, if that changed, signals a configuration change so the driver
// inflates or deflates towards it. Before the first activation there is
// nobody to signal; the driver reads the target when it starts.
func (d *Device) SetTargetPages(pages uint32) error {
	d.mu.Lock()
	changed := d.cfg.numPages != pages
	d.cfg.numPages = pages
	irq := d.irq
	d.mu.Unlock()
	if !changed || irq == nil {
		return nil
	}
	if err := irq.SignalConfigChange(); err != nil {
		return fmt.Errorf("balloon: signal new target of %d pages: %w", pages, err)
	}
	return nil
}

// SetTargetBytes sets the balloon target in bytes, rounded up to whole
// 4 KiB pages.
func (d *Device) SetTargetBytes(n uint64) error {
	pages := n/PageSize + min(n%PageSize, 1)
	if pages > math.MaxUint32 {
		return fmt.Errorf("balloon: target of %d bytes exceeds %d pages", n, uint64(math.MaxUint32))
	}
	return d.SetTargetPages(uint32(pages))
}

// TargetPages returns the target (num_pages).
func (d *Device) TargetPages() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.numPages
}

// ActualPages returns how many pages the driver says the balloon holds
// (actual). The driver updates it after its inflate and deflate requests.
func (d *Device) ActualPages() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.actual
}

// Counters returns the device's counters so far.
func (d *Device) Counters() Counters { return d.counters.snapshot() }

package blk

import (
	"errors"
	"fmt"
	"sync"

	"github.com/smolvm/smol/virtio"
)

// Options tune a block device beyond what its image determines.
type Options struct {
	// Serial is the string GET_ID returns (Linux shows it as
	// /sys/block/vdX/serial and names /dev/disk/by-id after it): at most
	// 20 printable ASCII bytes. Empty means the image's derived serial
	// (Disk.Serial).
	Serial string
}

// Device is a virtio-blk device serving one Disk through one request queue.
// The guest-facing methods follow virtio.Device's threading rules; the
// request work runs on one worker goroutine between Activate and Reset.
type Device struct {
	disk     *Disk
	serial   string
	config   [configSize]byte // immutable after New: the capacity never changes
	features uint64
	stats    stats

	*virtio.Lifecycle // the worker: Notify, Reset, Pause, Resume

	mu sync.Mutex // guards serial against Restore
}

var _ virtio.Device = (*Device)(nil)

// New returns a block device for disk. The device does not own the disk
// until Close: the caller closes the device, which closes the disk.
func New(disk *Disk, opts Options) (*Device, error) {
	if disk == nil {
		return nil, errors.New("blk: nil disk")
	}
	serial := opts.Serial
	if serial == "" {
		serial = disk.Serial()
	}
	if err := validSerial(serial); err != nil {
		return nil, err
	}
	return &Device{
		disk:      disk,
		serial:    serial,
		config:    buildConfig(disk.Sectors(), disk.ReadOnly()),
		features:  offeredFeatures(disk.ReadOnly()),
		Lifecycle: virtio.NewLifecycle("blk", 1),
	}, nil
}

func validSerial(s string) error {
	if len(s) > IDBytes {
		return fmt.Errorf("blk: serial %q is longer than %d bytes", s, IDBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("blk: serial %q is not printable ASCII", s)
		}
	}
	return nil
}

// Disk returns the image the device serves.
func (d *Device) Disk() *Disk { return d.disk }

// Serial returns the GET_ID string.
func (d *Device) Serial() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.serial
}

// ID is virtio.IDBlock.
func (d *Device) ID() virtio.DeviceID { return virtio.IDBlock }

// Features are the virtio-blk feature bits offered for this disk.
func (d *Device) Features() uint64 { return d.features }

// QueueSizes: one request queue.
func (d *Device) QueueSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig reads struct virtio_blk_config; bytes past its end read as 0.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	clear(data)
	if offset < configSize {
		copy(data, d.config[offset:])
	}
}

// WriteConfig ignores writes: every field smol offers is read-only (the
// writable "writeback" field exists only with CONFIG_WCE, not offered).
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate starts the worker on the request queue.
func (d *Device) Activate(env virtio.Env) error {
	if env.Mem == nil || env.Interrupt == nil {
		return errors.New("blk: activate without guest memory or interrupter")
	}
	if len(env.Queues) != 1 || env.Queues[0] == nil || !env.Queues[0].Ready() {
		return errors.New("blk: activate: the request queue is not set up")
	}
	w := &worker{
		disk: d.disk,
		lim: limits{
			sectors:  d.disk.Sectors(),
			readOnly: d.disk.ReadOnly(),
			features: env.Features,
		},
		writeThrough: env.Features&FeatureFlush == 0,
		serial:       d.Serial(), // Restore changes it only while inactive
		stats:        &d.stats,
	}
	return d.Lifecycle.Activate(env, w.run)
}

// Close stops the device and closes its disk, releasing the image lock.
func (d *Device) Close() error {
	d.Reset()
	return d.disk.Close()
}

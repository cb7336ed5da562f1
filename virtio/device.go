package virtio

// DeviceID is a virtio device type (virtio 1.2, section 5).
type DeviceID uint32

// Device types smol implements.
const (
	IDNet     DeviceID = 1
	IDBlock   DeviceID = 2
	IDConsole DeviceID = 3
	IDRNG     DeviceID = 4
	IDBalloon DeviceID = 5
	IDGPU     DeviceID = 16
	IDInput   DeviceID = 18
	IDVsock   DeviceID = 19
)

// Device-independent feature bits (virtio 1.2, section 6). The transport
// offers VERSION_1, RING_INDIRECT_DESC and RING_EVENT_IDX for every device;
// a device offers only its own bits (0-23) through Device.Features.
const (
	FeatureRingIndirectDesc = 1 << 28
	FeatureRingEventIdx     = 1 << 29
	FeatureVersion1         = 1 << 32
	FeatureAccessPlatform   = 1 << 33
)

// Memory is guest memory as devices see it: every access is bounds-checked
// and fails for addresses outside guest RAM. *memory.Guest implements it.
type Memory interface {
	Slice(addr, length uint64) ([]byte, error)
}

// Interrupter raises the device's interrupt on behalf of a queue or a
// configuration change. The transport implements it: it sets the
// InterruptStatus bit and signals the irqfd.
type Interrupter interface {
	SignalUsed(queue int) error
	SignalConfigChange() error
}

// Env is what a device receives when the driver sets DRIVER_OK: the
// negotiated features, the queues the driver set up (nil where it left a
// queue disabled) and the way to interrupt it.
type Env struct {
	Mem       Memory
	Features  uint64 // negotiated: offered by the device (and transport) and accepted by the driver
	Queues    []*Queue
	Interrupt Interrupter
}

// Device is one virtio device behind a transport. The transport handles
// everything device-independent (registers, feature negotiation, queue
// setup, status, reset); a device handles its config space and its queues.
//
// Threading: ReadConfig and WriteConfig run on vCPU threads. Notify runs on
// the thread that observed the driver's notification (an ioeventfd poller,
// or a vCPU thread when no ioeventfd is wired) and must not block: devices
// do their queue work on their own goroutines, which Activate starts and
// Reset stops.
type Device interface {
	// ID is the virtio device type.
	ID() DeviceID
	// Features are the device-specific feature bits offered (bits 0-23 and
	// any device bits above 32 the device defines).
	Features() uint64
	// QueueSizes lists each queue's maximum size (a power of two); its
	// length is the number of queues.
	QueueSizes() []uint16
	// ReadConfig and WriteConfig access the device-specific configuration
	// space at offset (relative to its start); out-of-range bytes read as 0
	// and are ignored on write.
	ReadConfig(offset uint64, data []byte)
	WriteConfig(offset uint64, data []byte)
	// Activate starts the device once the driver set DRIVER_OK.
	Activate(env Env) error
	// Notify says the driver made buffers available on queue.
	Notify(queue int)
	// Reset stops the device's work and returns it to its initial state;
	// the transport calls it when the driver writes 0 to Status and when the
	// VM stops. It waits for in-flight work to finish.
	Reset()
}

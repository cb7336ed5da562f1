package vsock

import (
	"errors"
	"fmt"
	"time"
)

// DefaultCID is the guest context ID when Config.CID is zero: the first one
// that is not reserved (0 hypervisor, 1 loopback, 2 host).
const DefaultCID = 3

// Config configures a vsock device.
type Config struct {
	// CID is the guest's context ID (DefaultCID when zero). The header
	// carries 64 bits but the upper 32 are reserved, and 0xFFFFFFFF is
	// VMADDR_CID_ANY, so valid values are 3 to 0xFFFFFFFE.
	CID uint64
	// UDSPath is the Unix socket the device listens on for host-initiated
	// connections; guest-initiated connections to port P go to UDSPath_P.
	UDSPath string
}

// Errors for configuration mistakes. They are wrapped with the offending
// value; test for them with errors.Is.
var (
	ErrInvalidCID         = errors.New("vsock: invalid guest CID")
	ErrNoSocketPath       = errors.New("vsock: no Unix socket path")
	ErrSocketPathTooLong  = errors.New("vsock: Unix socket path too long")
	ErrSocketDirMissing   = errors.New("vsock: Unix socket directory does not exist")
	ErrSocketInUse        = errors.New("vsock: Unix socket path is in use by another process")
	ErrSocketPathOccupied = errors.New("vsock: Unix socket path exists and is not a socket")
)

// maxSocketPath is the longest path that fits sockaddr_un.sun_path with its
// terminating NUL.
const maxSocketPath = 107

// Tuning. The numbers bound memory per connection and how long the device
// waits on a peer; they are not negotiated with anyone.
const (
	// queueSize is the size of each of the three virtqueues.
	queueSize = 256
	// hostBufAlloc is the receive buffer the device advertises to the guest
	// for each connection: the most guest data it holds for a host socket
	// that is not reading. 256 KiB is Linux's default vsock buffer, what
	// vhost-vsock advertises; 128 KiB left the guest waiting for credit and
	// cost about 45% of guest-to-host throughput (BENCHMARKS.md).
	hostBufAlloc = 256 << 10
	// creditUpdateThreshold is how many bytes the device forwards to the
	// host before it tells the guest (CREDIT_UPDATE) without being asked.
	// A guest blocked on credit has a full window in flight, so this is
	// always reached before it could wait forever.
	creditUpdateThreshold = hostBufAlloc / 4
	// readChunk is the most one host socket read takes; each read is one
	// hand-off to the worker, so bigger chunks mean fewer.
	readChunk = 64 << 10
	// pendingLimit is how much host data the device holds per connection
	// for a guest that has no credit or no rx buffers: the reader stops
	// reading the host socket at this level.
	pendingLimit = 128 << 10
	// maxConns bounds the connection slots; further requests get RST. A
	// slot is a connection in the table or a dial still in flight for one
	// the guest already reset. With the per-connection buffers above it
	// bounds what a hostile guest can make the VMM hold: 256 × (256 KiB +
	// 128 KiB + one 64 KiB read), about 112 MiB, for host programs that
	// accept and never read.
	maxConns = 256
	// connectionGoroutines and connectionSockets are what the connection
	// slots can hold on the host at once (see the package doc): a slot is
	// one dial (at most two goroutines, its own and the net package's
	// while it aborts a cancelled connect; at most one socket) or one
	// connection (a reader and a writer goroutine, one socket).
	connectionGoroutines = 2 * maxConns
	connectionSockets    = maxConns
	// txBudgetPerPass is how many tx chains the worker takes in one pass
	// before it looks at the host side again, so that a guest keeping its
	// tx queue full still gets host data and dial results (which free
	// connection slots) delivered. A quarter of the queue: big enough that
	// bulk traffic pays for a pass rarely.
	txBudgetPerPass = queueSize / 4
	// hostEventBudget is how many ready host-side events the worker takes
	// between two passes that both had guest packets waiting.
	hostEventBudget = 64
	// maxControlBacklog is how many connection-less replies (RSTs) may wait
	// for rx buffers before the device stops reading the guest's tx queue.
	maxControlBacklog = 256
	// firstEphemeralPort is where host-side ports for host-initiated
	// connections start, far above ports services listen on.
	firstEphemeralPort = 1 << 30
	// connectTimeout bounds the wait for the guest's RESPONSE to a
	// host-initiated REQUEST, and for dialling a host listener.
	connectTimeout = 2 * time.Second
	// closeTimeout bounds the flush of guest data to the host after the
	// guest shut a connection down in both directions.
	closeTimeout = 2 * time.Second
	// handshakeTimeout bounds how long a host program may take to send its
	// "CONNECT P\n" line.
	handshakeTimeout = 5 * time.Second
)

// validate fills in defaults and checks cfg.
func (cfg Config) validate() (Config, error) {
	if cfg.CID == 0 {
		cfg.CID = DefaultCID
	}
	if cfg.CID < DefaultCID || cfg.CID >= 0xFFFF_FFFF {
		return cfg, fmt.Errorf("%w: %d (want 3 to 4294967294)", ErrInvalidCID, cfg.CID)
	}
	if cfg.UDSPath == "" {
		return cfg, ErrNoSocketPath
	}
	if len(cfg.UDSPath) > maxSocketPath {
		return cfg, fmt.Errorf("%w: %q is %d bytes, at most %d fit", ErrSocketPathTooLong, cfg.UDSPath, len(cfg.UDSPath), maxSocketPath)
	}
	return cfg, nil
}

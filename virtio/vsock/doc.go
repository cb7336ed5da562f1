// Package vsock implements the virtio socket device (virtio 1.2, section
// 5.10): stream connections between guest AF_VSOCK sockets and host Unix
// domain sockets.
//
// The host side follows the convention Firecracker documents, so host tools
// written for it work unchanged:
//
//   - Guest to host: a guest connecting to host CID 2, port P reaches the
//     Unix listener at UDSPath + "_P" (for example /tmp/v.sock_1234).
//   - Host to guest: a host program connects to the Unix socket the device
//     listens on (UDSPath), writes "CONNECT P\n", and once the guest accepts
//     on port P it reads "OK <host port>\n" followed by the stream itself.
//
// The package is split by role. packet.go is the wire header; conn.go is one
// connection's state machine and credit accounting; muxer.go is the
// connection table that turns guest packets into host actions and host events
// into packets for the guest. Neither touches guest memory or sockets, so the
// protocol is unit-tested on its own. unix.go is the host socket side
// (listener, dialler and the per-connection reader and writer goroutines);
// worker.go is the single goroutine that owns the virtqueues and moves packets
// between them and the muxer; device.go is the virtio.Device the transport
// sees.
//
// Flow control is the virtio-vsock credit scheme in both directions: the
// device never sends the guest more than the guest advertised (buf_alloc
// minus bytes in flight), and it advertises a fixed per-connection buffer of
// its own, acknowledging bytes (fwd_cnt) only once they are written to the
// host socket. A slow host reader therefore stalls that one connection in the
// guest, never the device, and no buffer grows without bound.
//
// # What a hostile guest can make the host hold
//
// Every host resource the guest can cause is tied to one of maxConns (256)
// connection slots. A slot is either a connection in the table (a reader
// and a writer goroutine and one host socket) or a dial in flight (one
// goroutine, two for a moment while the net package aborts a cancelled
// connect, and at most one socket). A dial keeps its slot after the guest
// resets its connection, until it reports back: otherwise a guest sending
// REQUEST and RST in a loop would start dials faster than they finish. A
// dial whose connection was reset closes its socket as soon as it connects,
// and its connection never gets a reader or writer. So guest-initiated work
// holds at most 2 × maxConns = 512 goroutines (connectionGoroutines) and
// maxConns = 256 host sockets (connectionSockets), plus the device's worker
// and listener; the goroutines of a connection already closed hold no
// socket and only have to be scheduled to exit. REQUESTs beyond the cap get
// RST at once.
//
// The worker's time is bounded too: one pass takes at most
// txBudgetPerPass tx chains, then the worker handles what the host side has
// ready (data, dial results, host programs, timers) before the next pass,
// so a guest that keeps its tx queue full delays host traffic by at most one
// pass and cannot keep the slots of finished dials from coming back.
package vsock

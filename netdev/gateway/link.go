package gateway

import (
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	vnet "github.com/smolvm/smol/virtio/net"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// checksumEndpoint is the channel endpoint with checksum offloads: the
// stack never verifies the guest's checksums (the guest is the only
// sender, and a flow it corrupts is its own; a driver that negotiated
// VIRTIO_NET_F_CSUM does not even compute them), and it skips computing
// its own once the driver accepts frames marked DATA_VALID
// (VIRTIO_NET_F_GUEST_CSUM). Checksumming 64 KiB segments twice per
// direction is most of what a userspace stack costs per byte.
type checksumEndpoint struct {
	*channel.Endpoint
	txOffload atomic.Bool // the driver negotiated GUEST_CSUM
}

func (e *checksumEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	c := e.Endpoint.Capabilities() | stack.CapabilityRXChecksumOffload
	if e.txOffload.Load() {
		c |= stack.CapabilityTXChecksumOffload
	}
	return c
}

// link moves Ethernet frames between the virtio-net device and the
// gateway's stack, screening every frame from the guest first.
type link struct {
	csum     *checksumEndpoint
	ep       *channel.Endpoint
	guestMAC [6]byte
	readable chan struct{} // a frame for the guest was queued (capacity 1)
	notify   *channel.NotificationHandle
	// injected holds frames the gateway made itself (relayed echo
	// replies), which bypass the stack.
	injected chan []byte

	// Dropped counts guest frames the screen refused.
	dropped atomic.Uint64
	mu      sync.Mutex // serialises reads of the channel with close
	closed  bool
}

func newLink(ep *channel.Endpoint, guestMAC [6]byte) *link {
	l := &link{csum: &checksumEndpoint{Endpoint: ep}, ep: ep, guestMAC: guestMAC, readable: make(chan struct{}, 1), injected: make(chan []byte, maxEchoes)}
	l.notify = ep.AddNotify(l)
	return l
}

// WriteNotify implements channel.Notification: the stack queued a frame.
func (l *link) WriteNotify() {
	select {
	case l.readable <- struct{}{}:
	default:
	}
}

// inject queues a frame for the guest beside the stack's; it is dropped
// when the queue is full.
func (l *link) inject(frame []byte) {
	select {
	case l.injected <- frame:
		l.WriteNotify()
	default:
	}
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.ep.RemoveNotify(l.notify)
	l.ep.Close()
}

// What screen decides for a guest frame.
type frameVerdict int

const (
	dropFrame  frameVerdict = iota
	passFrame               // into the stack
	relayFrame              // an ICMP echo request to a remote address: relayEcho
)

// screen decides what happens to a frame from the guest. The guest may
// speak ARP and IPv4, from its own MAC and address. ICMP enters the stack
// only when it is for the gateway: the stack would answer echo requests to
// any address (it accepts every destination), forging replies from hosts
// that may not exist, so echo requests to remote addresses are relayed
// instead and every other ICMP message is dropped.
func (l *link) screen(frame []byte) frameVerdict {
	if len(frame) < header.EthernetMinimumSize {
		return dropFrame
	}
	eth := header.Ethernet(frame)
	if [6]byte([]byte(eth.SourceAddress())) != l.guestMAC {
		return dropFrame
	}
	payload := frame[header.EthernetMinimumSize:]
	switch eth.Type() {
	case header.ARPProtocolNumber:
		a := header.ARP(payload)
		if a.IsValid() && [6]byte(a.HardwareAddressSender()) == l.guestMAC &&
			netip.AddrFrom4([4]byte(a.ProtocolAddressSender())) == GuestIP {
			return passFrame
		}
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(payload)
		if !ip.IsValid(len(payload)) || toAddr(ip.SourceAddress()) != GuestIP {
			return dropFrame
		}
		switch ip.TransportProtocol() {
		case header.TCPProtocolNumber, header.UDPProtocolNumber:
			return passFrame
		case header.ICMPv4ProtocolNumber:
			if toAddr(ip.DestinationAddress()) == GatewayIP {
				return passFrame
			}
			if ic := header.ICMPv4(ip.Payload()); len(ic) >= header.ICMPv4MinimumSize && ic.Type() == header.ICMPv4Echo &&
				ip.FragmentOffset() == 0 && ip.Flags()&header.IPv4FlagMoreFragments == 0 {
				return relayFrame
			}
		}
	}
	return dropFrame
}

// WritePacket implements vnet.Backend: one frame from the guest.
func (g *Gateway) WritePacket(bufs [][]byte) (int, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if total < vnet.HeaderSize {
		g.link.dropped.Add(1)
		return total, nil
	}
	// The frame is copied out of guest memory at once: the stack keeps it
	// after this returns, and the guest could change it under the screen.
	frame := make([]byte, 0, total-vnet.HeaderSize)
	skip := vnet.HeaderSize
	for _, b := range bufs {
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		frame = append(frame, b[skip:]...)
		skip = 0
	}
	switch g.link.screen(frame) {
	case dropFrame:
		g.link.dropped.Add(1)
		return total, nil
	case relayFrame:
		g.relayEcho(header.IPv4(frame[header.EthernetMinimumSize:]))
		return total, nil
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
	g.link.ep.InjectInbound(0, pkt)
	pkt.DecRef()
	return total, nil
}

// ReadPacket implements vnet.Backend: the next frame for the guest, with
// an empty virtio-net header (no offloads are offered).
func (g *Gateway) ReadPacket(bufs [][]byte) (int, error) {
	l := g.link
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, vnet.ErrNoPacket
	}
	var hdr [vnet.HeaderSize]byte
	if l.csum.txOffload.Load() {
		hdr[0] = vnet.HeaderDataValid // the stack left its checksums out
	}
	binary.LittleEndian.PutUint16(hdr[10:], 1) // num_buffers; the device rewrites it
	select {
	case frame := <-l.injected:
		l.mu.Unlock()
		return scatter(bufs, scatter(bufs, 0, hdr[:]), frame), nil
	default:
	}
	pkt := l.ep.Read()
	l.mu.Unlock()
	if pkt == nil {
		return 0, vnet.ErrNoPacket
	}
	defer pkt.DecRef()
	n := scatter(bufs, 0, hdr[:])
	for _, s := range pkt.AsSlices() {
		n = scatter(bufs, n, s)
	}
	return n, nil
}

// scatter copies src into bufs starting at byte offset off of their
// concatenation and returns the offset after it; what does not fit is cut
// (the device offers room for the largest frame, so only a frame that was
// too long is).
func scatter(bufs [][]byte, off int, src []byte) int {
	pos := 0
	for _, b := range bufs {
		if len(src) == 0 {
			break
		}
		if off >= pos+len(b) {
			pos += len(b)
			continue
		}
		n := copy(b[off-pos:], src)
		src = src[n:]
		off += n
		pos += len(b)
	}
	return off
}

// WaitReadable implements vnet.Backend.
func (g *Gateway) WaitReadable(ctx context.Context) error {
	if g.link.ep.NumQueued() > 0 || len(g.link.injected) > 0 {
		return nil
	}
	select {
	case <-g.link.readable:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SupportedOffloads implements vnet.Backend: checksum offload both ways
// (checksumEndpoint); no segmentation offloads, whose work the large MTU
// does.
func (g *Gateway) SupportedOffloads() uint64 { return vnet.FeatureCsum | vnet.FeatureGuestCsum }

// SetOffloads implements vnet.Backend.
func (g *Gateway) SetOffloads(features uint64) error {
	g.link.csum.txOffload.Store(features&vnet.FeatureGuestCsum != 0)
	return nil
}

var _ vnet.Backend = (*Gateway)(nil)

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

// link moves Ethernet frames between the virtio-net device and the
// gateway's stack, screening every frame from the guest first.
type link struct {
	ep       *channel.Endpoint
	guestMAC [6]byte
	readable chan struct{} // a frame for the guest was queued (capacity 1)
	notify   *channel.NotificationHandle

	// Dropped counts guest frames the screen refused.
	dropped atomic.Uint64
	mu      sync.Mutex // serialises reads of the channel with close
	closed  bool
}

func newLink(ep *channel.Endpoint, guestMAC [6]byte) *link {
	l := &link{ep: ep, guestMAC: guestMAC, readable: make(chan struct{}, 1)}
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

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.ep.RemoveNotify(l.notify)
	l.ep.Close()
}

// screen decides whether a frame from the guest may enter the stack. The
// guest may speak ARP and IPv4, from its own MAC and address, and ICMP
// only to the gateway: the stack would otherwise answer echo requests to
// any address (it accepts every destination), forging replies from hosts
// that may not exist.
func (l *link) screen(frame []byte) bool {
	if len(frame) < header.EthernetMinimumSize {
		return false
	}
	eth := header.Ethernet(frame)
	if [6]byte([]byte(eth.SourceAddress())) != l.guestMAC {
		return false
	}
	payload := frame[header.EthernetMinimumSize:]
	switch eth.Type() {
	case header.ARPProtocolNumber:
		a := header.ARP(payload)
		if !a.IsValid() {
			return false
		}
		return [6]byte(a.HardwareAddressSender()) == l.guestMAC &&
			netip.AddrFrom4([4]byte(a.ProtocolAddressSender())) == GuestIP
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(payload)
		if !ip.IsValid(len(payload)) {
			return false
		}
		if toAddr(ip.SourceAddress()) != GuestIP {
			return false
		}
		switch ip.TransportProtocol() {
		case header.TCPProtocolNumber, header.UDPProtocolNumber:
			return true
		case header.ICMPv4ProtocolNumber:
			return toAddr(ip.DestinationAddress()) == GatewayIP
		}
	}
	return false
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
	if !g.link.screen(frame) {
		g.link.dropped.Add(1)
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
	pkt := l.ep.Read()
	l.mu.Unlock()
	if pkt == nil {
		return 0, vnet.ErrNoPacket
	}
	defer pkt.DecRef()
	var hdr [vnet.HeaderSize]byte
	binary.LittleEndian.PutUint16(hdr[10:], 1) // num_buffers; the device rewrites it
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
	if g.link.ep.NumQueued() > 0 {
		return nil
	}
	select {
	case <-g.link.readable:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SupportedOffloads implements vnet.Backend: none; the large MTU does the
// work segmentation offloads would.
func (g *Gateway) SupportedOffloads() uint64 { return 0 }

// SetOffloads implements vnet.Backend.
func (g *Gateway) SetOffloads(features uint64) error { return nil }

var _ vnet.Backend = (*Gateway)(nil)

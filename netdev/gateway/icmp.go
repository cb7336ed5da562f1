package gateway

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/smolvm/smol/netdev/policy"
	"golang.org/x/net/icmp"
	xipv4 "golang.org/x/net/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// echoTimeout is how long a relayed echo request waits for its reply.
const echoTimeout = 5 * time.Second

// maxEchoes bounds echo requests being relayed at once.
const maxEchoes = 64

// relayEcho relays a guest's ICMP echo request (ip, already screened:
// from the guest, to a remote address) through an unprivileged ICMP
// socket of the VMM, if the policy allows the destination, and hands the
// guest the host's real reply. No reply is ever made up: a host that does
// not answer, or a policy or host setting (net.ipv4.ping_group_range) that
// forbids the echo, leaves the guest with none.
func (g *Gateway) relayEcho(ip header.IPv4) {
	icmpHdr := header.ICMPv4(ip.Payload())
	if len(icmpHdr) < header.ICMPv4MinimumSize || icmpHdr.Type() != header.ICMPv4Echo || icmpHdr.Code() != 0 {
		return
	}
	dst := toAddr(ip.DestinationAddress())
	v := g.policy.Check(policy.ICMP, netip.AddrPortFrom(dst, 0))
	if v.Allowed && !g.echoes.acquire() {
		v = policy.Verdict{Reason: "limit: echo requests in flight"}
	}
	g.events.flow(policy.ICMP, netip.AddrPortFrom(dst, 0), v)
	if !v.Allowed {
		return
	}
	id, seq := icmpHdr.Ident(), icmpHdr.Sequence()
	data := append([]byte(nil), icmpHdr.Payload()...)
	if !g.goFlow(func() {
		defer g.echoes.release()
		reply, ok := g.echo(dst, id, seq, data)
		if ok {
			g.link.inject(echoReplyFrame(g.link.guestMAC, dst, id, seq, reply))
		}
	}) {
		g.echoes.release()
	}
}

// echo sends one echo request to dst from a socket of its own and returns
// the reply's data. It uses an unprivileged ICMP socket, or a raw one
// where net.ipv4.ping_group_range forbids those and the VMM may open raw
// sockets (root).
func (g *Gateway) echo(dst netip.Addr, id, seq uint16, data []byte) ([]byte, bool) {
	var to net.Addr = &net.UDPAddr{IP: dst.AsSlice()}
	c, err := icmp.ListenPacket("udp4", "0.0.0.0")
	if err != nil {
		if c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0"); err != nil {
			return nil, false // the host allows neither
		}
		to = &net.IPAddr{IP: dst.AsSlice()}
	}
	defer c.Close()
	stop := contextAfter(g, func() { c.Close() })
	defer stop()
	msg := icmp.Message{Type: xipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: int(id), Seq: int(seq), Data: data}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return nil, false
	}
	if _, err := c.WriteTo(b, to); err != nil {
		return nil, false
	}
	c.SetReadDeadline(time.Now().Add(echoTimeout))
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return nil, false
		}
		if from.String() != dst.String() {
			continue
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != xipv4.ICMPTypeEchoReply {
			continue
		}
		// The kernel owns the echo ID of a ping socket (a raw socket sees
		// every reply, so there the ID must match too); the sequence
		// number tells this reply from a stale one.
		e, ok := m.Body.(*icmp.Echo)
		if !ok || e.Seq != int(seq) {
			continue
		}
		if _, raw := to.(*net.IPAddr); raw && e.ID != int(id) {
			continue
		}
		return e.Data, true
	}
}

// echoReplyFrame is the Ethernet frame of an echo reply from src to the
// guest, carrying the guest's own ID and sequence number.
func echoReplyFrame(guestMAC [6]byte, src netip.Addr, id, seq uint16, data []byte) []byte {
	const ipLen = header.IPv4MinimumSize
	icmpLen := header.ICMPv4MinimumSize + len(data)
	frame := make([]byte, header.EthernetMinimumSize+ipLen+icmpLen)
	eth := header.Ethernet(frame)
	eth.Encode(&header.EthernetFields{SrcAddr: tcpipLinkAddress(GatewayMAC), DstAddr: tcpipLinkAddress(guestMAC), Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(frame[header.EthernetMinimumSize:])
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(ipLen + icmpLen), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: tcpipAddr4(src), DstAddr: tcpipAddr4(GuestIP),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	ic := header.ICMPv4(ip.Payload())
	ic.SetType(header.ICMPv4EchoReply)
	ic.SetCode(0)
	binary.BigEndian.PutUint16(ic[4:], id)
	binary.BigEndian.PutUint16(ic[6:], seq)
	copy(ic[header.ICMPv4MinimumSize:], data)
	ic.SetChecksum(0)
	ic.SetChecksum(^checksum(ic))
	return frame
}

// checksum is the Internet checksum's one's complement sum of b.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

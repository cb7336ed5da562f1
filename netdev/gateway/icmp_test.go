package gateway

import (
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TestEchoRelay pings this host's loopback through the relay (a raw or
// unprivileged ICMP socket, whichever the host allows) and checks the
// frame the guest would get.
func TestEchoRelay(t *testing.T) {
	r := newRig(t, nil, nil, Limits{})
	lo := netip.MustParseAddr("127.0.0.1")
	data := []byte("smol ping payload")
	reply, ok := r.gw.echo(lo, 0x1234, 7, data)
	if !ok {
		t.Skip("this host allows neither unprivileged nor raw ICMP sockets")
	}
	if string(reply) != string(data) {
		t.Fatalf("reply data %q", reply)
	}
	frame := echoReplyFrame(guestMAC, lo, 0x1234, 7, reply)
	ip := header.IPv4(frame[header.EthernetMinimumSize:])
	if !ip.IsValid(len(ip)) || ip.CalculateChecksum() != 0xffff || toAddr(ip.DestinationAddress()) != GuestIP || toAddr(ip.SourceAddress()) != lo {
		t.Fatalf("bad IPv4 header in the reply frame: % x", frame[:34])
	}
	ic := header.ICMPv4(ip.Payload())
	if ic.Type() != header.ICMPv4EchoReply || ic.Ident() != 0x1234 || ic.Sequence() != 7 || checksum(ic) != 0xffff {
		t.Fatalf("bad echo reply: type %d id %#x seq %d sum %#x", ic.Type(), ic.Ident(), ic.Sequence(), checksum(ic))
	}
}

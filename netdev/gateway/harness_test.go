package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	vnet "github.com/smolvm/smol/virtio/net"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

var guestMAC = [6]byte{0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc}

// guest is a guest-side gVisor stack joined to a gateway through the
// gateway's virtio-net Backend methods, exactly as the device calls them:
// frames with a virtio-net header in front.
type guest struct {
	t     *testing.T
	gw    *Gateway
	stack *stack.Stack
	ep    *channel.Endpoint
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newGuest(t *testing.T, gw *Gateway) *guest {
	t.Helper()
	ep := channel.New(1024, MTU, tcpip.LinkAddress(guestMAC[:]))
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
	})
	if err := s.CreateNIC(1, ethernet.New(ep)); err != nil {
		t.Fatal(err)
	}
	addr := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(GuestIP.As4()).WithPrefix()}
	addr.AddressWithPrefix.PrefixLen = 24
	if err := s.AddProtocolAddress(1, addr, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(GatewayIP.As4()), NIC: 1}})
	g := &guest{t: t, gw: gw, stack: s, ep: ep, stop: make(chan struct{})}
	g.wg.Add(2)
	go g.toGateway()
	go g.fromGateway()
	t.Cleanup(func() {
		close(g.stop)
		gw.Close()
		s.Close()
		ep.Close()
		g.wg.Wait()
	})
	return g
}

// toGateway is the guest's transmit path: each frame the guest stack
// sends goes to WritePacket behind a virtio-net header.
func (g *guest) toGateway() {
	defer g.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-g.stop; cancel() }()
	for {
		pkt := g.ep.ReadContext(ctx)
		if pkt == nil {
			return
		}
		var frame []byte
		for _, s := range pkt.AsSlices() {
			frame = append(frame, s...)
		}
		pkt.DecRef()
		g.send(frame)
	}
}

// send hands one raw Ethernet frame to the gateway as the device would.
func (g *guest) send(frame []byte) {
	g.gw.WritePacket([][]byte{make([]byte, vnet.HeaderSize), frame})
}

// fromGateway is the guest's receive path.
func (g *guest) fromGateway() {
	defer g.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-g.stop; cancel() }()
	buf := make([]byte, vnet.MaxPacketLen+1)
	for {
		n, err := g.gw.ReadPacket([][]byte{buf[:7], buf[7:]}) // a split header, as chains may give
		if err != nil {
			if g.gw.WaitReadable(ctx) != nil {
				return
			}
			continue
		}
		frame := append([]byte(nil), buf[vnet.HeaderSize:n]...)
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
		g.ep.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(ap.Addr().AsSlice()), Port: ap.Port()}
}

// dial opens a TCP connection from the guest.
func (g *guest) dial(ctx context.Context, dst string) (net.Conn, error) {
	return gonet.DialContextTCP(ctx, g.stack, fullAddr(netip.MustParseAddrPort(dst)), ipv4.ProtocolNumber)
}

// udp opens a UDP socket from the guest to dst.
func (g *guest) udp(dst string) (net.Conn, error) {
	raddr := fullAddr(netip.MustParseAddrPort(dst))
	return gonet.DialUDP(g.stack, nil, &raddr, ipv4.ProtocolNumber)
}

// lookup asks the resolver at server (any address: the gateway answers)
// for name over UDP from the guest.
func (g *guest) lookup(server, name string, qtype uint16) (*dns.Msg, error) {
	c, err := g.udp(server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	b, _ := q.Pack()
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	r := new(dns.Msg)
	return r, r.Unpack(buf[:n])
}

// hosts is the fake internet the gateway dials: each fake address is a
// real listener on loopback, so the flows are real sockets.
type hosts struct {
	mu    sync.Mutex
	addrs map[string]string // fake address:port -> real loopback address
	dials []string
}

func (h *hosts) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	h.mu.Lock()
	real, ok := h.addrs[network+" "+address]
	h.dials = append(h.dials, network+" "+address)
	h.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s %s: connection refused", network, address)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, real)
}

func (h *hosts) add(network, fake, real string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.addrs == nil {
		h.addrs = map[string]string{}
	}
	h.addrs[network+" "+fake] = real
}

func (h *hosts) dialed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.dials...)
}

// echoTCP starts a TCP server that echoes, on loopback, and returns its
// address.
func echoTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	return l.Addr().String()
}

// serveEcho echoes every connection l accepts, passing the client's EOF
// on as a half-close where the connection has one, until the test ends.
func serveEcho(t *testing.T, l net.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				if hc, ok := c.(interface{ CloseWrite() error }); ok {
					hc.CloseWrite()
				}
			}()
		}
	}()
}

// echoUDP starts a UDP echo server on loopback.
func echoUDP(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
	return c.LocalAddr().String()
}

// dnsServer is an authoritative test server for a few A records.
func dnsServer(t *testing.T, records map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := dns.NewServeMux()
	mux.HandleFunc(".", func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		ip, ok := records[q.Name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", q.Name, ip))
			m.Answer = append(m.Answer, rr)
		case q.Qtype == dns.TypeAAAA:
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN AAAA 2001:db8::1", q.Name))
			m.Answer = append(m.Answer, rr)
		case q.Qtype == dns.TypeTXT:
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN TXT \"secret\"", q.Name))
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: mux}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

func tcpipAddr(a [4]byte) tcpip.Address { return tcpip.AddrFrom4(a) }

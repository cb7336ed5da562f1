package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/smolvm/smol/netdev/policy"
	gvlog "gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// The guest's network. The agent configures the guest's side at boot.
var (
	Subnet    = netip.MustParsePrefix("10.0.2.0/24")
	GatewayIP = netip.MustParseAddr("10.0.2.2")
	GuestIP   = netip.MustParseAddr("10.0.2.15")
	// GatewayMAC is the gateway's side of the link.
	GatewayMAC = [6]byte{0x52, 0x54, 0x00, 0x12, 0x35, 0x02}
)

// MTU is the link's MTU, offered to the guest's driver. A large MTU lets
// the guest's TCP send 64 KiB segments without segmentation offloads,
// which is most of the throughput of a userspace gateway.
const MTU = 65520

const nicID = 1

// Limits bound what a guest can make the gateway hold. Zero fields take
// the defaults in DefaultLimits.
type Limits struct {
	TCPFlows    int // open TCP connections
	HalfOpen    int // TCP connections being dialled on the host
	UDPFlows    int // UDP flows (one per guest address and port and destination)
	DNSInFlight int // DNS queries being resolved upstream
	// FlowBuffer is the most bytes each direction of a TCP connection
	// buffers in the gateway's stack (its receive and send windows).
	FlowBuffer int
}

// DefaultLimits: at most TCPFlows*2*FlowBuffer = 2 GiB of flow buffers in
// the worst case, and in practice what the guest's peers are slow to take.
var DefaultLimits = Limits{TCPFlows: 1024, HalfOpen: 256, UDPFlows: 512, DNSInFlight: 128, FlowBuffer: 1 << 20}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.TCPFlows > 0 {
		d.TCPFlows = l.TCPFlows
	}
	if l.HalfOpen > 0 {
		d.HalfOpen = l.HalfOpen
	}
	if l.UDPFlows > 0 {
		d.UDPFlows = l.UDPFlows
	}
	if l.DNSInFlight > 0 {
		d.DNSInFlight = l.DNSInFlight
	}
	if l.FlowBuffer > 0 {
		d.FlowBuffer = l.FlowBuffer
	}
	return d
}

// Dialer opens the host side of a flow; net.Dialer is one. Tests plug in
// in-memory hosts.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config describes a gateway.
type Config struct {
	// GuestMAC is the guest's MAC address: frames from any other are
	// dropped.
	GuestMAC [6]byte
	// Policy decides every flow and name; nil allows everything above
	// the floor.
	Policy *policy.Policy
	// Resolvers are the upstream DNS servers (host:port); empty means the
	// nameservers of /etc/resolv.conf.
	Resolvers []string
	// Dialer opens host sockets; nil means a net.Dialer.
	Dialer Dialer
	// Log receives one JSON line per flow and per DNS denial (the egress
	// log); nil discards them.
	Log    io.Writer
	Limits Limits
}

// Gateway is one guest's network. It implements the virtio-net Backend
// interface (package virtio/net).
type Gateway struct {
	cfg    Config
	limits Limits
	policy *policy.Policy
	stack  *stack.Stack
	link   *link
	dialer Dialer
	events *eventLog
	pub    publisher

	tcpFlows, udpFlows, dnsInFlight, echoes semaphore

	ctx    context.Context
	cancel context.CancelFunc
	closed sync.Once

	// flows counts the goroutines serving flows, which Close waits for;
	// closing (under flowMu) stops new ones from being counted, since the
	// stack starts handlers on goroutines of its own at any time.
	flowMu  sync.Mutex
	closing bool
	flows   sync.WaitGroup
}

// startFlow counts a flow's goroutine in, unless the gateway is closing.
func (g *Gateway) startFlow() bool {
	g.flowMu.Lock()
	defer g.flowMu.Unlock()
	if g.closing {
		return false
	}
	g.flows.Add(1)
	return true
}

// quietStack keeps gVisor's own log (which goes to stderr, and reports
// what a hostile guest sends, such as martian packets) off the user's
// terminal: what matters to users is in the egress log.
var quietStack sync.Once

// New starts a gateway.
func New(cfg Config) (*Gateway, error) {
	quietStack.Do(func() {
		// The logger itself, not only the global target: gVisor's
		// packages keep rate-limited loggers made at init from it.
		l := gvlog.Log()
		l.Emitter = gvlog.GoogleEmitter{Writer: &gvlog.Writer{Next: io.Discard}}
		l.SetLevel(gvlog.Warning)
	})
	if cfg.GuestMAC == [6]byte{} || cfg.GuestMAC[0]&1 != 0 {
		return nil, fmt.Errorf("gateway: guest MAC %x is not a unicast address", cfg.GuestMAC)
	}
	if len(cfg.Resolvers) == 0 {
		cfg.Resolvers = systemResolvers()
	}
	g := &Gateway{cfg: cfg, limits: cfg.Limits.withDefaults(), policy: cfg.Policy, dialer: cfg.Dialer, events: newEventLog(cfg.Log)}
	if g.policy == nil {
		g.policy = policy.New(policy.Config{})
	}
	if g.dialer == nil {
		g.dialer = &net.Dialer{}
	}
	g.tcpFlows = newSemaphore(g.limits.TCPFlows)
	g.udpFlows = newSemaphore(g.limits.UDPFlows)
	g.dnsInFlight = newSemaphore(g.limits.DNSInFlight)
	g.echoes = newSemaphore(maxEchoes)
	g.ctx, g.cancel = context.WithCancel(context.Background())

	ch := channel.New(1024, MTU, tcpip.LinkAddress(GatewayMAC[:]))
	g.link = newLink(ch, cfg.GuestMAC)
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
	})
	g.stack = s
	if err := g.configureStack(ethernet.New(g.link.csum)); err != nil {
		s.Close()
		return nil, err
	}
	return g, nil
}

func (g *Gateway) configureStack(ep stack.LinkEndpoint) error {
	s := g.stack
	sack := tcpip.TCPSACKEnabled(true)
	// Windows start small and grow with the flow's rate (receive buffer
	// moderation), up to Limits.FlowBuffer.
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 128 << 10, Max: g.limits.FlowBuffer}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 128 << 10, Max: g.limits.FlowBuffer}
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &moderate, &rcv, &snd} {
		if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, opt); err != nil {
			return fmt.Errorf("gateway: tcp option %T: %s", opt, err)
		}
	}
	if err := s.CreateNIC(nicID, ep); err != nil {
		return fmt.Errorf("gateway: create NIC: %s", err)
	}
	// Promiscuous: the stack takes packets for every destination, so each
	// new flow reaches a forwarder; spoofing: its replies come from the
	// address the guest wrote to.
	if err := s.SetPromiscuousMode(nicID, true); err != nil {
		return fmt.Errorf("gateway: promiscuous mode: %s", err)
	}
	if err := s.SetSpoofing(nicID, true); err != nil {
		return fmt.Errorf("gateway: spoofing: %s", err)
	}
	addr := tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddrFrom4(GatewayIP.As4()).WithPrefix(),
	}
	addr.AddressWithPrefix.PrefixLen = Subnet.Bits()
	if err := s.AddProtocolAddress(nicID, addr, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("gateway: add address: %s", err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	tcpFwd := tcp.NewForwarder(s, 0, g.limits.HalfOpen, g.handleTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcpFwd.HandlePacket)
	udpFwd := udp.NewForwarder(s, g.handleUDP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, udpFwd.HandlePacket)
	return nil
}

// Close ends every flow and the stack.
func (g *Gateway) Close() error {
	g.closed.Do(func() {
		g.flowMu.Lock()
		g.closing = true
		g.flowMu.Unlock()
		g.cancel()
		g.pub.close()
		g.stack.Close()
		g.flows.Wait()
		g.stack.Wait()
		g.link.close()
		g.events.close()
	})
	return nil
}

// semaphore bounds a resource; acquire never blocks.
type semaphore chan struct{}

func newSemaphore(n int) semaphore { return make(semaphore, n) }

func (s semaphore) acquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s semaphore) release() { <-s }

// errLimit is a flow refused because a Limits bound was reached.
var errLimit = errors.New("limit reached")

// dialTimeout bounds how long a guest's connection attempt waits for the
// host's connect: the guest's SYN is answered (or reset) only then.
const dialTimeout = 10 * time.Second

func tcpipAddr4(a netip.Addr) tcpip.Address { return tcpip.AddrFrom4(a.As4()) }

func tcpipLinkAddress(mac [6]byte) tcpip.LinkAddress { return tcpip.LinkAddress(mac[:]) }

func toAddr(a tcpip.Address) netip.Addr {
	if a.Len() == 4 {
		return netip.AddrFrom4(a.As4())
	}
	if a.Len() == 16 {
		return netip.AddrFrom16(a.As16())
	}
	return netip.Addr{}
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/smolvm/smol/netdev/policy"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// Port is one published port (-p [HOSTADDR:]HOSTPORT:GUESTPORT[/tcp|/udp]):
// connections or datagrams to Host on the host reach the guest's
// GuestPort.
type Port struct {
	Host      netip.AddrPort // 127.0.0.1 unless an address was given
	GuestPort uint16
	Proto     string // "tcp" or "udp"
}

func (p Port) String() string {
	return fmt.Sprintf("%s:%d/%s", p.Host, p.GuestPort, p.Proto)
}

// ParsePort parses a -p value.
func ParsePort(s string) (Port, error) {
	p := Port{Proto: "tcp"}
	spec := s
	if rest, proto, ok := strings.Cut(s, "/"); ok {
		if proto != "tcp" && proto != "udp" {
			return p, fmt.Errorf("-p %q: protocol %q, want tcp or udp", s, proto)
		}
		spec, p.Proto = rest, proto
	}
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return p, fmt.Errorf("-p %q: want [HOSTADDR:]HOSTPORT:GUESTPORT[/tcp|/udp]", s)
	}
	guest, err := policy.ParsePort(spec[i+1:])
	if err != nil {
		return p, fmt.Errorf("-p %q: guest %w", s, err)
	}
	p.GuestPort = guest
	hostSpec := spec[:i]
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	hostPort := hostSpec
	if j := strings.LastIndexByte(hostSpec, ':'); j >= 0 {
		a := strings.TrimSuffix(strings.TrimPrefix(hostSpec[:j], "["), "]")
		if addr, err = netip.ParseAddr(a); err != nil {
			return p, fmt.Errorf("-p %q: host address %q is not an IP address", s, a)
		}
		hostPort = hostSpec[j+1:]
	}
	host, err := policy.ParsePort(hostPort)
	if err != nil {
		return p, fmt.Errorf("-p %q: host %w", s, err)
	}
	p.Host = netip.AddrPortFrom(addr.Unmap(), host)
	return p, nil
}

// publisher serves the published ports: it owns their host listeners.
type publisher struct {
	mu      sync.Mutex
	closers []func()
}

func (p *publisher) add(closer func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closers = append(p.closers, closer)
}

// Publish opens a host listener for each port and relays what reaches it
// into the guest. Every listener is opened before any is served, so a
// port already taken is an error here, before the guest boots, naming
// the port. The guest's unpublished ports are never reachable.
func (g *Gateway) Publish(ports []Port) error {
	seen := map[string]bool{}
	type opened struct {
		port Port
		tcp  net.Listener
		udp  net.PacketConn
	}
	var open []opened
	fail := func(err error) error {
		for _, o := range open {
			if o.tcp != nil {
				o.tcp.Close()
			} else {
				o.udp.Close()
			}
		}
		return err
	}
	for _, p := range ports {
		key := p.Proto + " " + p.Host.String()
		if seen[key] {
			return fail(fmt.Errorf("-p: host port %s/%s is published twice", p.Host, p.Proto))
		}
		seen[key] = true
		o := opened{port: p}
		var err error
		if p.Proto == "tcp" {
			o.tcp, err = net.Listen("tcp", p.Host.String())
		} else {
			o.udp, err = net.ListenPacket("udp", p.Host.String())
		}
		if err != nil {
			return fail(fmt.Errorf("-p %s: %w", p, errors.Unwrap(err)))
		}
		open = append(open, o)
	}
	for _, o := range open {
		if o.tcp != nil {
			l := o.tcp
			g.pub.add(func() { l.Close() })
			if !g.goFlow(func() { g.serveTCPPort(l, o.port.GuestPort) }) {
				l.Close()
			}
		} else {
			c := o.udp
			g.pub.add(func() { c.Close() })
			if !g.goFlow(func() { g.serveUDPPort(c, o.port.GuestPort) }) {
				c.Close()
			}
		}
	}
	return nil
}

func (p *publisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.closers {
		c()
	}
}

func (g *Gateway) guestAddr(port uint16) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(GuestIP.As4()), Port: port}
}

// serveTCPPort accepts host connections and connects each to the guest's
// port through the stack; a guest that does not listen resets it.
func (g *Gateway) serveTCPPort(l net.Listener, guestPort uint16) {
	for {
		host, err := l.Accept()
		if err != nil {
			return
		}
		if !g.tcpFlows.acquire() {
			host.Close()
			continue
		}
		if !g.goFlow(func() {
			defer g.tcpFlows.release()
			defer host.Close()
			ctx, cancel := context.WithTimeout(g.ctx, dialTimeout)
			guest, err := gonet.DialContextTCP(ctx, g.stack, g.guestAddr(guestPort), ipv4.ProtocolNumber)
			cancel()
			if err != nil {
				return
			}
			defer guest.Close()
			relay(g.ctx, host, guest)
		}) {
			host.Close()
			g.tcpFlows.release()
		}
	}
}

// serveUDPPort relays datagrams from each host client to the guest's port
// from a gateway port of its own, and the guest's replies back to that
// client, until the client is idle for udpIdle.
func (g *Gateway) serveUDPPort(c net.PacketConn, guestPort uint16) {
	var mu sync.Mutex
	clients := map[string]net.Conn{}
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			mu.Lock()
			for _, gc := range clients {
				gc.Close()
			}
			mu.Unlock()
			return
		}
		mu.Lock()
		guest, ok := clients[from.String()]
		if !ok && g.udpFlows.acquire() {
			raddr := g.guestAddr(guestPort)
			gc, err := gonet.DialUDP(g.stack, nil, &raddr, ipv4.ProtocolNumber)
			if err != nil {
				g.udpFlows.release()
			} else {
				guest, ok = gc, true
				clients[from.String()] = gc
				started := g.goFlow(func() {
					defer g.udpFlows.release()
					reply := make([]byte, maxDatagram)
					for {
						gc.SetReadDeadline(time.Now().Add(udpIdle))
						n, err := gc.Read(reply)
						if err != nil {
							break
						}
						c.WriteTo(reply[:n], from)
					}
					mu.Lock()
					delete(clients, from.String())
					mu.Unlock()
					gc.Close()
				})
				if !started {
					delete(clients, from.String())
					gc.Close()
					g.udpFlows.release()
					ok = false
				}
			}
		}
		mu.Unlock()
		if ok {
			guest.Write(buf[:n])
		}
	}
}

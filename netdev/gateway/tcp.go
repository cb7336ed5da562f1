package gateway

import (
	"context"
	"io"
	"net"
	"net/netip"

	"github.com/smolvm/smol/netdev/policy"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// handleTCP decides a guest's new connection (the stack calls it on a
// goroutine of its own for each SYN, at most Limits.HalfOpen at a time).
// The host side is dialled first: only a connect that succeeded completes
// the guest's handshake, so a refused or unreachable destination reaches
// the guest as a reset, at once, never as a hang.
func (g *Gateway) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	if dst.Port() == 53 {
		// DNS over TCP, to any address, is the gateway's to answer.
		g.acceptTCP(r, func(guest net.Conn, _ tcpip.Endpoint) { g.serveDNSStream(guest) })
		return
	}
	if dst.Addr() == GatewayIP {
		g.events.flow(policy.TCP, dst, policy.Verdict{Reason: "floor: the gateway"})
		r.Complete(true)
		return
	}
	v := g.policy.Check(policy.TCP, dst)
	if v.Allowed && !g.tcpFlows.acquire() {
		v = policy.Verdict{Reason: "limit: open TCP connections"}
	} else if v.Allowed {
		defer g.tcpFlows.release()
	}
	if !v.Allowed {
		g.events.flow(policy.TCP, dst, v)
		r.Complete(true)
		return
	}
	if v.Learned && namedPort(dst.Port()) {
		g.acceptTCP(r, func(guest net.Conn, ep tcpip.Endpoint) { g.relayNamed(guest, ep, dst) })
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, dialTimeout)
	host, err := g.dialer.DialContext(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		g.events.flow(policy.TCP, dst, policy.Verdict{Name: v.Name, Reason: "host connect failed"})
		r.Complete(true)
		return
	}
	g.events.flow(policy.TCP, dst, v)
	g.acceptTCP(r, func(guest net.Conn, _ tcpip.Endpoint) { relay(g.ctx, guest, host) })
	host.Close()
}

// relayNamed serves a connection that must name its server: the guest's
// handshake is complete, so its first bytes can be read for the name; a
// name the policy does not bind to this address resets the connection
// before anything reaches a host.
func (g *Gateway) relayNamed(guest net.Conn, ep tcpip.Endpoint, dst netip.AddrPort) {
	first, name := serverName(guest, dst.Port())
	v := g.policy.CheckName(name, dst)
	if !v.Allowed {
		g.events.flow(policy.TCP, dst, v)
		ep.Abort()
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, dialTimeout)
	host, err := g.dialer.DialContext(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		g.events.flow(policy.TCP, dst, policy.Verdict{Name: name, Reason: "host connect failed"})
		ep.Abort()
		return
	}
	defer host.Close()
	g.events.flow(policy.TCP, dst, v)
	if _, err := host.Write(first); err != nil {
		return
	}
	relay(g.ctx, guest, host)
}

// acceptTCP completes the guest's handshake and runs serve on the
// connection, closing it after.
func (g *Gateway) acceptTCP(r *tcp.ForwarderRequest, serve func(net.Conn, tcpip.Endpoint)) {
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		r.Complete(true)
		return
	}
	r.Complete(false)
	guest := gonet.NewTCPConn(&wq, ep)
	defer guest.Close()
	if !g.startFlow() {
		return
	}
	defer g.flows.Done()
	serve(guest, ep)
}

// halfCloser is a connection whose write side can be shut alone.
type halfCloser interface{ CloseWrite() error }

// relay copies both ways until both directions ended (each end's EOF
// is passed on as a half-close) or the gateway closes.
func relay(ctx context.Context, a, b net.Conn) {
	stop := context.AfterFunc(ctx, func() {
		a.Close()
		b.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if hc, ok := dst.(halfCloser); ok {
			hc.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
}

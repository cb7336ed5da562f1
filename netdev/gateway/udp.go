package gateway

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/smolvm/smol/netdev/policy"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// udpIdle ends a UDP flow that moved nothing for this long.
const udpIdle = 60 * time.Second

// maxDatagram is the largest UDP payload relayed.
const maxDatagram = 65507

// handleUDP decides the first datagram of a new flow (guest address and
// port to destination). It runs on the stack's receive path, so it only
// sets the flow up; the relay runs on its own goroutine. Returning false
// drops the datagram and lets the stack answer port unreachable.
func (g *Gateway) handleUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	if dst.Port() == 53 {
		// DNS, to any address, is the gateway's to answer.
		guest, ok := g.acceptUDP(r)
		if !ok {
			return false
		}
		if !g.goFlow(func() { g.serveDNSPackets(guest) }) {
			guest.Close()
		}
		return true
	}
	if dst.Addr() == GatewayIP {
		g.events.flow(policy.UDP, dst, policy.Verdict{Reason: "floor: the gateway"})
		return false
	}
	v := g.policy.Check(policy.UDP, dst)
	if v.Allowed && !g.udpFlows.acquire() {
		v = policy.Verdict{Reason: "limit: UDP flows"}
	}
	g.events.flow(policy.UDP, dst, v)
	if !v.Allowed {
		return false
	}
	ctx, cancel := context.WithTimeout(g.ctx, dialTimeout)
	host, err := g.dialer.DialContext(ctx, "udp", dst.String())
	cancel()
	if err != nil {
		g.udpFlows.release()
		return false
	}
	guest, ok := g.acceptUDP(r)
	if !ok {
		host.Close()
		g.udpFlows.release()
		return false
	}
	if !g.goFlow(func() {
		defer g.udpFlows.release()
		relayDatagrams(g.ctx, guest, host)
	}) {
		guest.Close()
		host.Close()
		g.udpFlows.release()
	}
	return true
}

func (g *Gateway) acceptUDP(r *udp.ForwarderRequest) (net.Conn, bool) {
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		return nil, false
	}
	return gonet.NewUDPConn(&wq, ep), true
}

// goFlow runs a flow's work on a goroutine Close waits for. Once the
// gateway is closing it runs nothing and returns false: the caller then
// releases what fn would have.
func (g *Gateway) goFlow(fn func()) bool {
	if !g.startFlow() {
		return false
	}
	go func() {
		defer g.flows.Done()
		fn()
	}()
	return true
}

// relayDatagrams moves datagrams both ways until the flow is idle for
// udpIdle or the gateway closes.
func relayDatagrams(ctx context.Context, guest, host net.Conn) {
	defer guest.Close()
	defer host.Close()
	stop := context.AfterFunc(ctx, func() {
		guest.Close()
		host.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, maxDatagram)
		for {
			src.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := src.Read(buf)
			if err != nil {
				break
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				break
			}
			// Traffic either way keeps the flow alive.
			dst.SetReadDeadline(time.Now().Add(udpIdle))
		}
		guest.Close()
		host.Close()
		done <- struct{}{}
	}
	go pipe(host, guest)
	go pipe(guest, host)
	<-done
	<-done
}

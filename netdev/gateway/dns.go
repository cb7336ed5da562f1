package gateway

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/smolvm/smol/netdev/policy"
)

// dnsIdle ends a guest's DNS flow (one source port) that asked nothing
// for this long.
const dnsIdle = 30 * time.Second

// upstreamTimeout bounds one upstream exchange.
const upstreamTimeout = 3 * time.Second

// maxUDPAnswer is the largest answer sent over UDP without EDNS.
const maxUDPAnswer = 512

// serveDNSPackets answers every query of one UDP DNS flow.
func (g *Gateway) serveDNSPackets(guest net.Conn) {
	defer guest.Close()
	stop := contextClose(g, guest)
	defer stop()
	buf := make([]byte, maxDatagram)
	for {
		guest.SetReadDeadline(time.Now().Add(dnsIdle))
		n, err := guest.Read(buf)
		if err != nil {
			return
		}
		if reply := g.answer(buf[:n], true); reply != nil {
			guest.Write(reply)
		}
	}
}

// serveDNSStream answers the length-prefixed queries of one TCP DNS
// connection.
func (g *Gateway) serveDNSStream(guest net.Conn) {
	stop := contextClose(g, guest)
	defer stop()
	var lenBuf [2]byte
	for {
		guest.SetReadDeadline(time.Now().Add(dnsIdle))
		if _, err := io.ReadFull(guest, lenBuf[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(guest, q); err != nil {
			return
		}
		reply := g.answer(q, false)
		if reply == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(reply)))
		if _, err := guest.Write(append(out, reply...)); err != nil {
			return
		}
	}
}

func contextClose(g *Gateway, c net.Conn) func() bool {
	return contextAfter(g, func() { c.Close() })
}

// answer builds the reply to one query from the guest, or nil for bytes
// that are not a DNS query at all. Names the policy does not allow get
// NXDOMAIN without leaving the host; AAAA questions get an empty answer
// (the guest's network is IPv4 only); everything else is asked upstream,
// and the addresses in the answer are taught to the policy.
func (g *Gateway) answer(query []byte, udp bool) []byte {
	var q dns.Msg
	if err := q.Unpack(query); err != nil || q.Response {
		return nil
	}
	reply := new(dns.Msg)
	reply.SetReply(&q)
	reply.RecursionAvailable = true
	limit := maxUDPAnswer
	if opt := q.IsEdns0(); opt != nil {
		limit = max(int(opt.UDPSize()), maxUDPAnswer)
	}
	switch {
	case q.Opcode != dns.OpcodeQuery:
		reply.Rcode = dns.RcodeNotImplemented
	case len(q.Question) != 1:
		reply.Rcode = dns.RcodeFormatError
	default:
		g.resolve(q.Question[0], reply)
	}
	if udp {
		reply.Truncate(limit)
	}
	out, err := reply.Pack()
	if err != nil {
		return nil
	}
	return out
}

// resolve fills reply with the answer to question.
func (g *Gateway) resolve(question dns.Question, reply *dns.Msg) {
	name := strings.ToLower(question.Name)
	if !g.policy.AllowName(name) {
		reply.Rcode = dns.RcodeNameError
		g.events.dns(name, dns.TypeToString[question.Qtype], false, "not allowed")
		return
	}
	if question.Qtype == dns.TypeAAAA || question.Qclass != dns.ClassINET {
		return // no IPv6 here, and nothing outside class IN: empty NOERROR
	}
	if !g.dnsInFlight.acquire() {
		reply.Rcode = dns.RcodeServerFailure
		g.events.dns(name, dns.TypeToString[question.Qtype], false, "limit: DNS queries in flight")
		return
	}
	defer g.dnsInFlight.release()
	up, err := g.exchange(question)
	if err != nil {
		reply.Rcode = dns.RcodeServerFailure
		return
	}
	reply.Rcode = up.Rcode
	for _, rr := range up.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(rr.A.To4()); ok {
				g.policy.Learn(name, a, time.Duration(rr.Hdr.Ttl)*time.Second)
			}
		case *dns.AAAA:
			continue // IPv4 only: never hand out an address the guest cannot use
		}
		if g.policy.Restricted() {
			switch rr.(type) {
			case *dns.A, *dns.CNAME:
			default:
				continue // an allowed name's answer, and nothing to smuggle beside it
			}
		}
		reply.Answer = append(reply.Answer, rr)
	}
	if !g.policy.Restricted() {
		reply.Ns, reply.Extra = up.Ns, nil
	}
}

// exchange asks each upstream resolver in turn, over UDP and then TCP if
// the answer was truncated.
func (g *Gateway) exchange(question dns.Question) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.Id = dns.Id()
	m.RecursionDesired = true
	m.Question = []dns.Question{question}
	m.SetEdns0(1232, false)
	var last error = errNoResolver
	for _, server := range g.cfg.Resolvers {
		c := &dns.Client{Net: "udp", Timeout: upstreamTimeout, Dialer: nil}
		r, _, err := c.ExchangeContext(g.ctx, m, server)
		if err == nil && r.Truncated {
			c.Net = "tcp"
			r, _, err = c.ExchangeContext(g.ctx, m, server)
		}
		if err == nil {
			return r, nil
		}
		last = err
	}
	return nil, last
}

type dnsError string

func (e dnsError) Error() string { return string(e) }

const errNoResolver = dnsError("gateway: no upstream DNS resolver (none in /etc/resolv.conf)")

// systemResolvers reads the host's nameservers from /etc/resolv.conf.
func systemResolvers() []string {
	cfg, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range cfg.Servers {
		out = append(out, net.JoinHostPort(s, cfg.Port))
	}
	return out
}

// recordName is the policy's spelling of a question's name.
var _ = policy.TCP

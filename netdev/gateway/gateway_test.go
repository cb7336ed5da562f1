package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/smolvm/smol/internal/syncbuf"
	"github.com/smolvm/smol/netdev/policy"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// egressEvents parses an egress log.
func egressEvents(t *testing.T, log *syncbuf.Buffer) []Event {
	t.Helper()
	var out []Event
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if line == "" {
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("egress log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

type rig struct {
	*guest
	hosts *hosts
	log   *syncbuf.Buffer
}

func newRig(t *testing.T, p *policy.Policy, records map[string]string, limits Limits) *rig {
	t.Helper()
	h := &hosts{}
	log := &syncbuf.Buffer{}
	gw, err := New(Config{GuestMAC: guestMAC, Policy: p, Resolvers: []string{dnsServer(t, records)}, Dialer: h, Log: log, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{guest: newGuest(t, gw), hosts: h, log: log}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTCPBothWaysChecksummed(t *testing.T) {
	r := newRig(t, nil, nil, Limits{})
	r.hosts.add("tcp", "198.51.100.1:7", echoTCP(t))
	c, err := r.dial(ctxT(t), "198.51.100.1:7")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 16<<20)
	rand.Read(data)
	go func() {
		c.Write(data)
		c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got := sha256.New()
	n, err := io.Copy(got, c)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("echoed %d of %d bytes: %v", n, len(data), err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(got.Sum(nil), want[:]) {
		t.Fatal("the echo differs from what was sent")
	}
}

func TestUDPEcho(t *testing.T) {
	r := newRig(t, nil, nil, Limits{})
	r.hosts.add("udp", "198.51.100.1:7", echoUDP(t))
	c, err := r.udp("198.51.100.1:7")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		msg := []byte("ping " + strings.Repeat("x", i*1000))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 8192)
		n, err := c.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("echo %d: %q %v", i, buf[:n], err)
		}
	}
}

var testRecords = map[string]string{
	"allowed.test.": "198.51.100.1",
	"denied.test.":  "198.51.100.2",
	"rebind.test.":  "127.0.0.1",
	"meta.test.":    "169.254.169.254",
}

func allowHosts(t *testing.T, names ...string) *policy.Policy {
	t.Helper()
	var rules []policy.HostRule
	for _, n := range names {
		r, err := policy.ParseHost(n)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	return policy.New(policy.Config{Hosts: rules})
}

// refusedFast dials dst from the guest and wants a reset within a second.
func (r *rig) refusedFast(t *testing.T, dst string) {
	t.Helper()
	start := time.Now()
	c, err := r.dial(ctxT(t), dst)
	if err == nil {
		c.Close()
		t.Fatalf("%s: connected", dst)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !strings.Contains(err.Error(), "refused") {
		t.Errorf("%s: %v, want connection refused", dst, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("%s: refused after %v", dst, d)
	}
}

func TestAllowHostPolicy(t *testing.T) {
	r := newRig(t, allowHosts(t, "allowed.test", "rebind.test", "meta.test"), testRecords, Limits{})
	echo := echoTCP(t)
	for _, fake := range []string{"198.51.100.1:80", "198.51.100.1:22", "198.51.100.2:80", "127.0.0.1:80", "169.254.169.254:80"} {
		r.hosts.add("tcp", fake, echo)
	}
	// Before any lookup, even the allowed host's address is refused.
	r.refusedFast(t, "198.51.100.1:80")

	m, err := r.lookup("10.0.2.2:53", "allowed.test", dns.TypeA)
	if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "198.51.100.1" {
		t.Fatalf("allowed.test: %v %v", m, err)
	}
	// A foreign resolver address is answered by the gateway too.
	for _, server := range []string{"8.8.8.8:53", "198.51.100.9:53"} {
		m, err := r.lookup(server, "denied.test", dns.TypeA)
		if err != nil || m.Rcode != dns.RcodeNameError {
			t.Errorf("denied.test via %s: %v %v", server, m, err)
		}
	}
	if m, err := r.lookup("10.0.2.2:53", "allowed.test", dns.TypeAAAA); err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Errorf("AAAA: %v %v, want an empty answer", m, err)
	}
	if m, err := r.lookup("10.0.2.2:53", "allowed.test", dns.TypeTXT); err != nil || len(m.Answer) != 0 {
		t.Errorf("TXT of an allowed name under policy: %v %v, want nothing", m, err)
	}

	// On the web's ports the connection must name its server, and the
	// name must be the one the address was learned for.
	req := "GET / HTTP/1.0\r\nHost: allowed.test\r\n\r\n"
	c, err := r.dial(ctxT(t), "198.51.100.1:80")
	if err != nil {
		t.Fatalf("allowed.test after lookup: %v", err)
	}
	c.Write([]byte(req))
	buf := make([]byte, len(req))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != req {
		t.Errorf("allowed flow: %q %v", buf, err)
	}
	c.Close()
	for _, other := range []string{"GET / HTTP/1.0\r\nHost: other.test\r\n\r\n", "GET / HTTP/1.0\r\n\r\n", "not http at all\r\n\r\n"} {
		c, err := r.dial(ctxT(t), "198.51.100.1:80")
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(other))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 64)); err == nil {
			t.Errorf("%q on allowed.test's address answered %d bytes", other, n)
		}
		c.Close()
	}
	r.refusedFast(t, "198.51.100.1:22") // not one of the name's ports
	r.refusedFast(t, "198.51.100.2:80") // denied.test's address, never handed out

	// Rebinding allowed names to loopback or metadata gets nowhere.
	for _, name := range []string{"rebind.test", "meta.test"} {
		if _, err := r.lookup("10.0.2.2:53", name, dns.TypeA); err != nil {
			t.Fatal(err)
		}
	}
	// A real guest keeps 127.0.0.1 on its own loopback; one that sends it
	// to the gateway anyway gets nothing (the stack drops martians).
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	if c, err := r.dial(ctx, "127.0.0.1:80"); err == nil {
		c.Close()
		t.Error("127.0.0.1 through the gateway connected")
	}
	cancel()
	r.refusedFast(t, "169.254.169.254:80")
	r.refusedFast(t, "10.0.2.2:80") // the gateway's other ports

	for _, d := range r.hosts.dialed() {
		if !strings.HasSuffix(d, "198.51.100.1:80") {
			t.Errorf("the gateway dialled %s", d)
		}
	}
	var denials []string
	for _, e := range egressEvents(t, r.log) {
		if !e.Allowed {
			denials = append(denials, e.Proto+" "+e.Dst+e.Name)
		}
	}
	for _, want := range []string{"tcp 198.51.100.2:80", "tcp 169.254.169.254:80", "tcp 10.0.2.2:80", "dns denied.test. A"} {
		found := false
		for _, d := range denials {
			found = found || d == want
		}
		if !found {
			t.Errorf("egress log lacks the denial %q (has %q)", want, denials)
		}
	}
}

func TestDNSOverTCPToAnyAddress(t *testing.T) {
	r := newRig(t, allowHosts(t, "allowed.test"), testRecords, Limits{})
	c, err := r.dial(ctxT(t), "203.0.113.53:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dc := &dns.Conn{Conn: c}
	q := new(dns.Msg)
	q.SetQuestion("denied.test.", dns.TypeA)
	if err := dc.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	m, err := dc.ReadMsg()
	if err != nil || m.Rcode != dns.RcodeNameError {
		t.Fatalf("denied.test over TCP: %v %v", m, err)
	}
	q.SetQuestion("allowed.test.", dns.TypeA)
	dc.WriteMsg(q)
	if m, err := dc.ReadMsg(); err != nil || len(m.Answer) != 1 {
		t.Fatalf("allowed.test over TCP: %v %v", m, err)
	}
	if len(r.hosts.dialed()) != 0 {
		t.Errorf("DNS over TCP reached the host: %v", r.hosts.dialed())
	}
}

// TestHostileFrames sends frames a hostile guest could: spoofed source
// MAC and address, IPv6, VLAN tags, unknown protocols, ICMP to remote
// hosts, truncated and garbage frames. None may reach the stack, none may
// panic, and the guest's own traffic keeps working.
func TestHostileFrames(t *testing.T) {
	r := newRig(t, nil, nil, Limits{})
	r.hosts.add("tcp", "198.51.100.1:7", echoTCP(t))
	eth := func(src [6]byte, typ uint16, payload []byte) []byte {
		f := make([]byte, header.EthernetMinimumSize, header.EthernetMinimumSize+len(payload))
		copy(f[0:6], GatewayMAC[:])
		copy(f[6:12], src[:])
		f[12], f[13] = byte(typ>>8), byte(typ)
		return append(f, payload...)
	}
	ipv4 := func(src, dst [4]byte, proto uint8) []byte {
		p := make([]byte, 40)
		ip := header.IPv4(p)
		ip.Encode(&header.IPv4Fields{TotalLength: 40, TTL: 64, Protocol: proto, SrcAddr: tcpipAddr(src), DstAddr: tcpipAddr(dst)})
		ip.SetChecksum(^ip.CalculateChecksum())
		return p
	}
	guestIP, remote := GuestIP.As4(), [4]byte{198, 51, 100, 1}
	other := [6]byte{0x52, 0x54, 0, 1, 2, 3}
	before := r.gw.link.dropped.Load()
	frames := [][]byte{
		nil, {1, 2, 3},
		eth(other, 0x0800, ipv4(guestIP, remote, 6)),                           // spoofed MAC
		eth(guestMAC, 0x0800, ipv4([4]byte{10, 0, 2, 99}, remote, 6)),          // spoofed address
		eth(guestMAC, 0x86dd, make([]byte, 60)),                                // IPv6
		eth(guestMAC, 0x8100, make([]byte, 60)),                                // VLAN
		eth(guestMAC, 0x0800, ipv4(guestIP, remote, 47)),                       // GRE
		eth(guestMAC, 0x0800, ipv4(guestIP, remote, 1)),                        // ICMP to a remote host
		eth(guestMAC, 0x0800, ipv4(guestIP, remote, 6)[:20]),                   // truncated
		eth(guestMAC, 0x0806, make([]byte, 28)),                                // ARP from no one
		append(eth(guestMAC, 0x0800, nil), bytes.Repeat([]byte{0xff}, 100)...), // garbage
	}
	for _, f := range frames {
		r.send(f)
	}
	if got := r.gw.link.dropped.Load() - before; got != uint64(len(frames)) {
		t.Errorf("dropped %d of %d hostile frames", got, len(frames))
	}
	c, err := r.dial(ctxT(t), "198.51.100.1:7")
	if err != nil {
		t.Fatalf("after hostile frames: %v", err)
	}
	c.Close()
}

func TestFlowLimits(t *testing.T) {
	r := newRig(t, nil, nil, Limits{TCPFlows: 4})
	r.hosts.add("tcp", "198.51.100.1:7", echoTCP(t))
	var open []net.Conn
	for i := 0; i < 4; i++ {
		c, err := r.dial(ctxT(t), "198.51.100.1:7")
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
	}
	r.refusedFast(t, "198.51.100.1:7")
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := r.dial(ctxT(t), "198.51.100.1:7")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection's slot never came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range open[1:] {
		c.Close()
	}
	found := false
	for _, e := range egressEvents(t, r.log) {
		found = found || strings.HasPrefix(e.Reason, "limit")
	}
	if !found {
		t.Error("the egress log does not show the limit")
	}
}

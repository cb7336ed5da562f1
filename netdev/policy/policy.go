// Package policy decides which network flows a guest may open: the egress
// rules of --allow-host and --allow-cidr, the names learned from DNS
// answers for allowed hosts, and the floor of addresses no guest reaches
// unless a CIDR rule names them (loopback, link-local and cloud metadata,
// the host's own addresses, the gateway).
//
// It knows nothing of packets or sockets: the userspace gateway asks it
// before it resolves a name or dials a destination, and a later kernel
// datapath backend could ask it the same questions. Nothing the guest
// sends reaches it except a name to look up and a destination to reach,
// both already parsed and bounded by the caller.
package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// TTL bounds for learned addresses: an answer's TTL is raised to MinTTL
// (clients cache longer than tiny TTLs say, and would otherwise fail a
// second connect) and cut to MaxTTL (a removed record must stop working).
const (
	MinTTL = 60 * time.Second
	MaxTTL = time.Hour
)

// MaxLearned bounds how many (address, name) pairs the policy remembers,
// so a guest resolving allowed wildcard names without end cannot grow it
// without bound; the entries closest to expiry go first.
const MaxLearned = 4096

// DefaultHostPorts are the ports an --allow-host rule without a port opens.
var DefaultHostPorts = []uint16{80, 443}

// Protocols a flow can use.
const (
	TCP  = "tcp"
	UDP  = "udp"
	ICMP = "icmp"
)

// Verdict is the answer for one flow.
type Verdict struct {
	Allowed bool
	// Name is the allowed host the destination was learned for, if that is
	// why it is allowed.
	Name string
	// Reason says why, for the egress log: "no policy", "cidr 10.0.0.0/8",
	// "learned", "floor: loopback", "not allowed".
	Reason string
	// Learned says the address is allowed only as one learned for an
	// allowed name: a connection that names its server (TLS, HTTP) must
	// then pass CheckName too.
	Learned bool
}

// Policy is one guest's egress policy. Its methods are safe for concurrent
// use.
type Policy struct {
	hosts   []HostRule
	cidrs   []CIDRRule
	floor   []floorRange
	now     func() time.Time
	denyAll bool

	mu      sync.Mutex
	learned map[netip.Addr][]learnedName
}

type learnedName struct {
	name    string
	ports   []uint16 // nil: any port
	expires time.Time
}

type floorRange struct {
	prefix netip.Prefix
	why    string
}

// Config is what a Policy is made from.
type Config struct {
	Hosts []HostRule
	CIDRs []CIDRRule
	// Floor adds addresses to the always-denied floor: the host's own
	// addresses and the gateway's.
	Floor []netip.Prefix
	// Now is the clock for TTLs; nil means time.Now.
	Now func() time.Time
	// DenyAll denies every flow and name no rule allows even with no
	// rule at all: a guest that has a network only for published ports.
	DenyAll bool
}

// builtinFloor is denied to every guest unless a CIDR rule names it.
var builtinFloor = []floorRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// New makes a policy. With no host or CIDR rule, every destination above
// the floor is allowed; with any rule, only what the rules allow.
func New(cfg Config) *Policy {
	p := &Policy{
		hosts:   slices.Clone(cfg.Hosts),
		cidrs:   slices.Clone(cfg.CIDRs),
		floor:   slices.Clone(builtinFloor),
		now:     cfg.Now,
		denyAll: cfg.DenyAll,
		learned: map[netip.Addr][]learnedName{},
	}
	for _, f := range cfg.Floor {
		p.floor = append(p.floor, floorRange{f.Masked(), "host or gateway address"})
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p
}

// Restricted tells whether any allow rule was given (or DenyAll):
// everything else is then denied.
func (p *Policy) Restricted() bool { return p.denyAll || len(p.hosts) > 0 || len(p.cidrs) > 0 }

// AllowName tells whether a DNS query for name may be resolved. Without
// rules every name may; with rules only names an --allow-host rule
// matches, so other names never leave the host.
func (p *Policy) AllowName(name string) bool {
	if !p.Restricted() {
		return true
	}
	name = canonicalName(name)
	for _, h := range p.hosts {
		if h.matches(name) {
			return true
		}
	}
	return false
}

// Learn records that name resolved to addr with ttl, so that flows to addr
// on the ports of name's rules are allowed until the TTL (clamped to
// [MinTTL, MaxTTL]) runs out. A name no rule allows teaches nothing.
func (p *Policy) Learn(name string, addr netip.Addr, ttl time.Duration) {
	if !p.Restricted() {
		return
	}
	name = canonicalName(name)
	var ports []uint16
	matched := false
	for _, h := range p.hosts {
		if h.matches(name) {
			matched = true
			if h.Port == 0 {
				ports = append(ports, DefaultHostPorts...)
			} else {
				ports = append(ports, h.Port)
			}
		}
	}
	if !matched {
		return
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	ttl = min(max(ttl, MinTTL), MaxTTL)
	expires := p.now().Add(ttl)
	addr = addr.Unmap()

	p.mu.Lock()
	defer p.mu.Unlock()
	entries := p.learned[addr]
	for i, e := range entries {
		if e.name == name {
			// A re-query extends, never shortens.
			entries[i].expires = later(e.expires, expires)
			entries[i].ports = ports
			return
		}
	}
	if p.countLocked() >= MaxLearned {
		p.evictLocked()
	}
	p.learned[addr] = append(entries, learnedName{name: name, ports: ports, expires: expires})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (p *Policy) countLocked() int {
	n := 0
	for _, es := range p.learned {
		n += len(es)
	}
	return n
}

// evictLocked drops expired entries, and if none was, the one closest to
// expiry.
func (p *Policy) evictLocked() {
	now := p.now()
	var oldestAddr netip.Addr
	var oldest time.Time
	dropped := false
	for addr, es := range p.learned {
		kept := es[:0]
		for _, e := range es {
			if e.expires.After(now) {
				kept = append(kept, e)
				if oldest.IsZero() || e.expires.Before(oldest) {
					oldest, oldestAddr = e.expires, addr
				}
			} else {
				dropped = true
			}
		}
		if len(kept) == 0 {
			delete(p.learned, addr)
		} else {
			p.learned[addr] = kept
		}
	}
	if dropped || !oldestAddr.IsValid() {
		return
	}
	es := p.learned[oldestAddr]
	for i, e := range es {
		if e.expires.Equal(oldest) {
			es = slices.Delete(es, i, i+1)
			break
		}
	}
	if len(es) == 0 {
		delete(p.learned, oldestAddr)
	} else {
		p.learned[oldestAddr] = es
	}
}

// Check decides a new flow of proto to dst. The floor comes first (only a
// CIDR rule that names the address opens it, which also stops a DNS answer
// from rebinding an allowed name to loopback or metadata), then the CIDR
// rules, then the addresses learned for allowed names.
func (p *Policy) Check(proto string, dst netip.AddrPort) Verdict {
	addr := dst.Addr().Unmap()
	port := dst.Port()
	for _, c := range p.cidrs {
		if c.matches(proto, addr, port) {
			return Verdict{Allowed: true, Reason: "cidr " + c.String()}
		}
	}
	for _, f := range p.floor {
		if f.prefix.Contains(addr) {
			return Verdict{Reason: "floor: " + f.why}
		}
	}
	if !p.Restricted() {
		return Verdict{Allowed: true, Reason: "no policy"}
	}
	if proto == UDP && port == 443 {
		// QUIC cannot be matched to a name; clients fall back to TCP.
		return Verdict{Reason: "not allowed (udp/443 under --allow-host)"}
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.learned[addr] {
		if !e.expires.After(now) {
			continue
		}
		if proto == ICMP || slices.Contains(e.ports, port) {
			return Verdict{Allowed: true, Name: e.name, Reason: "learned", Learned: true}
		}
	}
	return Verdict{Reason: "not allowed"}
}

// canonicalName lower-cases a DNS name and drops its trailing dot.
func canonicalName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// HostRule is one --allow-host NAME[:PORT].
type HostRule struct {
	Name     string // lower case, no trailing dot, without the "*." of a wildcard
	Wildcard bool   // "*.Name": subdomains of Name, not Name itself
	Port     uint16 // 0: DefaultHostPorts
}

func (h HostRule) matches(name string) bool {
	if h.Wildcard {
		return strings.HasSuffix(name, "."+h.Name)
	}
	return name == h.Name
}

func (h HostRule) String() string {
	s := h.Name
	if h.Wildcard {
		s = "*." + s
	}
	if h.Port != 0 {
		s += fmt.Sprintf(":%d", h.Port)
	}
	return s
}

// CIDRRule is one --allow-cidr CIDR[:PORT].
type CIDRRule struct {
	Prefix netip.Prefix
	Port   uint16 // 0: every port
}

func (c CIDRRule) matches(proto string, addr netip.Addr, port uint16) bool {
	if !c.Prefix.Contains(addr) {
		return false
	}
	return c.Port == 0 || proto == ICMP || c.Port == port
}

func (c CIDRRule) String() string {
	if c.Port == 0 {
		return c.Prefix.String()
	}
	if c.Prefix.Addr().Is6() {
		return fmt.Sprintf("[%s]:%d", c.Prefix, c.Port)
	}
	return fmt.Sprintf("%s:%d", c.Prefix, c.Port)
}

// CheckName decides a connection whose client named the host it wants
// (TLS SNI, the HTTP Host header) after Check allowed its destination as
// a learned address: the name must be one the rules allow on this port
// and the destination must have been learned for that very name. Without
// it, an address shared by many names (a CDN) would open all of them to
// a guest that looked up one.
func (p *Policy) CheckName(name string, dst netip.AddrPort) Verdict {
	name = canonicalName(name)
	if name == "" {
		return Verdict{Reason: "not allowed (no server name in the connection)"}
	}
	addr := dst.Addr().Unmap()
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.learned[addr] {
		if e.name == name && e.expires.After(now) && slices.Contains(e.ports, dst.Port()) {
			return Verdict{Allowed: true, Name: name, Reason: "learned, name checked"}
		}
	}
	return Verdict{Name: name, Reason: "not allowed (server name " + name + " not learned for this address)"}
}

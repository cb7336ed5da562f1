package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func mustHost(t *testing.T, s string) HostRule {
	t.Helper()
	r, err := ParseHost(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustCIDR(t *testing.T, s string) CIDRRule {
	t.Helper()
	r, err := ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNoRulesAllowsAllButTheFloor(t *testing.T) {
	p := New(Config{Floor: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}})
	if p.Restricted() || !p.AllowName("anything.example") {
		t.Fatal("a policy without rules restricts names")
	}
	if v := p.Check(TCP, ap("203.0.113.9:22")); !v.Allowed {
		t.Errorf("public address refused: %+v", v)
	}
	for _, dst := range []string{"127.0.0.1:80", "169.254.169.254:80", "192.0.2.7:443", "[::1]:80", "[::ffff:127.0.0.1]:80", "[fe80::1]:22", "224.0.0.251:5353", "0.0.0.0:80"} {
		if v := p.Check(TCP, ap(dst)); v.Allowed || !strings.HasPrefix(v.Reason, "floor") {
			t.Errorf("%s: %+v, want the floor to deny it", dst, v)
		}
	}
}

func TestHostRulesLearnFromAnswers(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	p := New(Config{Hosts: []HostRule{mustHost(t, "allowed.test"), mustHost(t, "*.cdn.test:8443")}, Now: clock.now})
	for name, want := range map[string]bool{
		"allowed.test": true, "ALLOWED.test.": true, "sub.allowed.test": false, "denied.test": false,
		"a.cdn.test": true, "x.y.cdn.test": true, "cdn.test": false, "evilcdn.test": false,
	} {
		if got := p.AllowName(name); got != want {
			t.Errorf("AllowName(%q) = %v, want %v", name, got, want)
		}
	}
	if v := p.Check(TCP, ap("198.51.100.1:443")); v.Allowed {
		t.Fatalf("an address nobody resolved is allowed: %+v", v)
	}
	p.Learn("allowed.test", netip.MustParseAddr("198.51.100.1"), time.Second)
	p.Learn("denied.test", netip.MustParseAddr("198.51.100.2"), time.Hour) // no rule: teaches nothing
	p.Learn("a.cdn.test", netip.MustParseAddr("198.51.100.3"), 2*time.Hour)
	cases := []struct {
		proto, dst string
		want       bool
	}{
		{TCP, "198.51.100.1:443", true},
		{TCP, "198.51.100.1:80", true},
		{TCP, "198.51.100.1:22", false},  // not one of the name's ports
		{UDP, "198.51.100.1:443", false}, // QUIC
		{TCP, "198.51.100.2:443", false},
		{TCP, "198.51.100.3:8443", true},
		{TCP, "198.51.100.3:443", false},
	}
	for _, c := range cases {
		if v := p.Check(c.proto, ap(c.dst)); v.Allowed != c.want {
			t.Errorf("%s %s: %+v, want allowed=%v", c.proto, c.dst, v, c.want)
		}
	}
	// A 1 s TTL is raised to MinTTL; past it the address is refused again.
	clock.t = clock.t.Add(MinTTL - time.Second)
	if v := p.Check(TCP, ap("198.51.100.1:443")); !v.Allowed || v.Name != "allowed.test" {
		t.Errorf("before MinTTL: %+v", v)
	}
	clock.t = clock.t.Add(2 * time.Second)
	if v := p.Check(TCP, ap("198.51.100.1:443")); v.Allowed {
		t.Errorf("after the clamped TTL: %+v", v)
	}
	// A 2 h TTL is cut to MaxTTL.
	clock.t = time.Unix(1e9, 0).Add(MaxTTL + time.Second)
	if v := p.Check(TCP, ap("198.51.100.3:8443")); v.Allowed {
		t.Errorf("after MaxTTL: %+v", v)
	}
}

func TestRebindingToTheFloorIsRefused(t *testing.T) {
	p := New(Config{Hosts: []HostRule{mustHost(t, "allowed.test")}})
	for _, a := range []string{"127.0.0.1", "169.254.169.254", "::ffff:169.254.169.254"} {
		p.Learn("allowed.test", netip.MustParseAddr(a), time.Hour)
		dst := netip.AddrPortFrom(netip.MustParseAddr(a), 80)
		if v := p.Check(TCP, dst); v.Allowed {
			t.Errorf("allowed.test rebound to %s is allowed: %+v", a, v)
		}
	}
}

func TestCIDRRules(t *testing.T) {
	p := New(Config{CIDRs: []CIDRRule{mustCIDR(t, "10.0.0.0/8:5432"), mustCIDR(t, "203.0.113.5"), mustCIDR(t, "127.0.0.1:8080")}})
	if !p.Restricted() || p.AllowName("example.com") {
		t.Fatal("CIDR rules must deny every name")
	}
	cases := map[string]bool{
		"10.1.2.3:5432": true, "10.1.2.3:5433": false,
		"203.0.113.5:1": true, "203.0.113.6:1": false,
		"127.0.0.1:8080": true, "127.0.0.1:8081": false, // the floor opens only where a rule says
	}
	for dst, want := range cases {
		if v := p.Check(TCP, ap(dst)); v.Allowed != want {
			t.Errorf("%s: %+v, want %v", dst, v, want)
		}
	}
}

func TestLearnedTableIsBounded(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	p := New(Config{Hosts: []HostRule{mustHost(t, "*.flood.test")}, Now: clock.now})
	for i := 0; i < MaxLearned*2; i++ {
		clock.t = clock.t.Add(time.Millisecond)
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		p.Learn("n.flood.test", a, time.Hour)
	}
	p.mu.Lock()
	n := p.countLocked()
	p.mu.Unlock()
	if n > MaxLearned {
		t.Errorf("%d learned entries, bound %d", n, MaxLearned)
	}
	lastIndex := 2*MaxLearned - 1
	last := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(lastIndex >> 8), byte(lastIndex)}), 443)
	if v := p.Check(TCP, last); !v.Allowed {
		t.Errorf("the newest entry was evicted: %+v", v)
	}
}

func TestParseRejectsBadValues(t *testing.T) {
	for _, s := range []string{"", ":80", "a..b", "-a.test", "a-.test", "a.test:0", "a.test:65536", "a.test:x", "a b.test", "1.2.3.4", strings.Repeat("a", 64) + ".test", "*.", "ex$mple.com"} {
		if _, err := ParseHost(s); err == nil {
			t.Errorf("ParseHost(%q) accepted", s)
		}
	}
	for _, s := range []string{"", "10.0.0.0/33", "10.0.0.0/8:0", "10.0.0.0/8:70000", "host.test", "[::1/128", "[::/0]443", "1.2.3"} {
		if _, err := ParseCIDR(s); err == nil {
			t.Errorf("ParseCIDR(%q) accepted", s)
		}
	}
	if r := mustCIDR(t, "[2001:db8::/32]:443"); r.Port != 443 || r.Prefix.Bits() != 32 {
		t.Errorf("v6 with port: %+v", r)
	}
	if r := mustCIDR(t, "2001:db8::1"); r.Prefix.Bits() != 128 {
		t.Errorf("bare v6 address: %+v", r)
	}
	if r := mustHost(t, "*.Example.COM:8080"); !r.Wildcard || r.Name != "example.com" || r.Port != 8080 {
		t.Errorf("wildcard: %+v", r)
	}
}

func TestDenyAll(t *testing.T) {
	p := New(Config{DenyAll: true})
	if p.AllowName("example.com") {
		t.Error("DenyAll allows a name")
	}
	if v := p.Check(TCP, ap("203.0.113.9:443")); v.Allowed {
		t.Errorf("DenyAll allows a flow: %+v", v)
	}
}

func TestCheckNameBindsTheServerNameToItsAddress(t *testing.T) {
	p := New(Config{Hosts: []HostRule{mustHost(t, "allowed.test"), mustHost(t, "other.test")}})
	shared := netip.MustParseAddr("198.51.100.7") // one CDN address for two names
	p.Learn("allowed.test", shared, time.Hour)
	dst := netip.AddrPortFrom(shared, 443)
	if v := p.CheckName("Allowed.Test.", dst); !v.Allowed {
		t.Errorf("the learned name: %+v", v)
	}
	for _, name := range []string{"other.test", "denied.test", ""} {
		if v := p.CheckName(name, dst); v.Allowed {
			t.Errorf("%q on allowed.test's address: %+v", name, v)
		}
	}
	if v := p.CheckName("allowed.test", netip.AddrPortFrom(shared, 22)); v.Allowed {
		t.Errorf("another port: %+v", v)
	}
}

package policy

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkAllowedFlowDecision is the policy's whole share of an allowed
// fetch under --allow-host: the DNS answer's name check and the learning
// of its address, then the connection's check. Against an unrestricted
// --net this is the VMM time the policy adds to the first byte (the
// target is under 1 ms); 50 rules and a full table of learned addresses
// make it the slow case.
func BenchmarkAllowedFlowDecision(b *testing.B) {
	var cfg Config
	for i := 0; i < 50; i++ {
		r, _ := ParseHost(fmt.Sprintf("host%d.example.com", i))
		cfg.Hosts = append(cfg.Hosts, r)
	}
	w, _ := ParseHost("*.cdn.example.net")
	cfg.Hosts = append(cfg.Hosts, w)
	p := New(cfg)
	for i := 0; i < MaxLearned-1; i++ {
		p.Learn(fmt.Sprintf("a%d.cdn.example.net", i), netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), time.Hour)
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.7"), 443)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !p.AllowName("host49.example.com.") {
			b.Fatal("name refused")
		}
		p.Learn("host49.example.com.", dst.Addr(), 5*time.Minute)
		if v := p.Check(TCP, dst); !v.Allowed {
			b.Fatal(v)
		}
	}
}

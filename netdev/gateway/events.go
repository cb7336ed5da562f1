package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/smolvm/smol/netdev/policy"
)

// Event is one line of the egress log: a flow the guest opened or a name
// it asked for, and what the policy said.
type Event struct {
	Time    time.Time `json:"time"`
	Proto   string    `json:"proto"`          // tcp, udp, icmp or dns
	Dst     string    `json:"dst,omitempty"`  // address:port of a flow
	Name    string    `json:"name,omitempty"` // the allowed host a flow's address was learned for, or the name asked
	Allowed bool      `json:"allowed"`
	Reason  string    `json:"reason"`
}

// eventLog writes events as JSON lines. Writes are serialised; a failing
// writer loses events rather than stalling a flow.
type eventLog struct {
	mu sync.Mutex
	w  io.Writer
}

func newEventLog(w io.Writer) *eventLog { return &eventLog{w: w} }

func (l *eventLog) write(e Event) {
	if l.w == nil {
		return
	}
	e.Time = time.Now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil {
		l.w.Write(append(b, '\n'))
	}
}

func (l *eventLog) flow(proto string, dst netip.AddrPort, v policy.Verdict) {
	l.write(Event{Proto: proto, Dst: dst.String(), Name: v.Name, Allowed: v.Allowed, Reason: v.Reason})
}

func (l *eventLog) dns(name, qtype string, allowed bool, reason string) {
	l.write(Event{Proto: "dns", Name: name + " " + qtype, Allowed: allowed, Reason: reason})
}

func (l *eventLog) close() {
	l.mu.Lock()
	l.w = nil
	l.mu.Unlock()
}

// contextAfter runs fn when the gateway closes; the returned function
// cancels that.
func contextAfter(g *Gateway, fn func()) func() bool { return context.AfterFunc(g.ctx, fn) }

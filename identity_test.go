package smol

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol/agent"
)

// fakeGuest is the guest end of one identity session: it reads the Start
// frame and answers it with Exit, or, when silent, keeps the connection
// open and says nothing, as a socket that the guest's late transport
// reset closed under the agent.
func fakeGuest(t *testing.T, conn net.Conn, silent bool, got chan<- agent.Start) {
	defer conn.Close()
	f, err := agent.NewReader(conn).Read()
	if err != nil || f.Type != agent.FrameStart {
		t.Errorf("the guest read %v, %v; want a Start frame", f.Type, err)
		return
	}
	var start agent.Start
	if err := json.Unmarshal(f.Payload, &start); err != nil {
		t.Errorf("start: %v", err)
		return
	}
	got <- start
	if silent {
		time.Sleep(time.Second)
		return
	}
	payload, _ := json.Marshal(agent.Exit{})
	agent.NewWriter(conn).Write(agent.FrameExit, payload)
}

// TestIdentityRetriesASilentSession: the first connection is taken and
// never answered; the identity goes again on a second one, the same
// identity, and succeeds.
func TestIdentityRetriesASilentSession(t *testing.T) {
	id, err := newIdentity(1)
	if err != nil {
		t.Fatal(err)
	}
	starts := make(chan agent.Start, 4)
	dials := 0
	dial := func(context.Context) (net.Conn, error) {
		dials++
		host, guest := net.Pipe()
		go fakeGuest(t, guest, dials == 1, starts)
		return host, nil
	}
	limits := identityTimeouts{total: 5 * time.Second, answer: 200 * time.Millisecond, redial: time.Millisecond}
	if err := sendIdentity(dial, nil, agent.Start{Idle: true, Hostname: "m", Identity: id}, limits); err != nil {
		t.Fatalf("identity: %v", err)
	}
	if dials != 2 {
		t.Errorf("%d dials, want 2", dials)
	}
	first, second := <-starts, <-starts
	if first.Identity == nil || second.Identity == nil || first.Identity.MachineID != second.Identity.MachineID {
		t.Errorf("the two sessions carried different identities: %+v, %+v", first.Identity, second.Identity)
	}
}

// TestIdentityGivesUp: a guest that never answers fails the hand-over
// once the time is up, saying why; a refusal fails it at once; a VM that
// ends stops the tries.
func TestIdentityGivesUp(t *testing.T) {
	id, err := newIdentity(1)
	if err != nil {
		t.Fatal(err)
	}
	start := agent.Start{Idle: true, Hostname: "m", Identity: id}
	starts := make(chan agent.Start, 100)
	silent := func(context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go fakeGuest(t, guest, true, starts)
		return host, nil
	}
	began := time.Now()
	err = sendIdentity(silent, nil, start, identityTimeouts{total: 500 * time.Millisecond, answer: 100 * time.Millisecond, redial: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not answer within") {
		t.Errorf("a silent guest: %v", err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("gave up after %v", took)
	}

	refused := func(context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go func() {
			defer guest.Close()
			agent.NewReader(guest).Read()
			payload, _ := json.Marshal(agent.Exit{Error: "no identity for you"})
			agent.NewWriter(guest).Write(agent.FrameExit, payload)
		}()
		return host, nil
	}
	if err := sendIdentity(refused, nil, start, identityTimeouts{total: 5 * time.Second, answer: time.Second, redial: time.Millisecond}); err == nil || err.Error() != "no identity for you" {
		t.Errorf("a refusal: %v", err)
	}

	done := make(chan struct{})
	close(done)
	unreachable := func(context.Context) (net.Conn, error) { return nil, errors.New("refused") }
	if err := sendIdentity(unreachable, done, start, identityTimeouts{total: 5 * time.Second, answer: time.Second, redial: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "VM ended") {
		t.Errorf("a VM that ended: %v", err)
	}
}

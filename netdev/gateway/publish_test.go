package gateway

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

func TestParsePort(t *testing.T) {
	for in, want := range map[string]string{
		"8080:80":               "127.0.0.1:8080:80/tcp",
		"0.0.0.0:8080:80/udp":   "0.0.0.0:8080:80/udp",
		"[::1]:8443:443":        "[::1]:8443:443/tcp",
		"192.0.2.1:53:5353/udp": "192.0.2.1:53:5353/udp",
	} {
		p, err := ParsePort(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePort(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "80", "0:80", "80:0", "70000:80", "80:80/sctp", "host:80:80", "a:b"} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
}

// guestEchoServer listens on port in the guest stack and echoes.
func (g *guest) echoServer(t *testing.T, port uint16) {
	t.Helper()
	l, err := gonet.ListenTCP(g.stack, tcpip.FullAddress{NIC: 1, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
}

func freePort(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestPublishedTCPPort(t *testing.T) {
	r := newRig(t, nil, nil, Limits{})
	r.echoServer(t, 80)
	hostAddr := freePort(t, "tcp")
	_, hostPort, _ := net.SplitHostPort(hostAddr)
	p, err := ParsePort(hostPort + ":80")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.gw.Publish([]Port{p}); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", hostAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := strings.Repeat("published ", 10000)
	go c.Write([]byte(msg))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo through the published port: %v", err)
	}

	// The same host port again, in use: one clear error, nothing opened.
	if err := r.gw.Publish([]Port{p}); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("publishing a taken port: %v", err)
	}
	// A guest port nobody listens on: the host connection is closed.
	other := freePort(t, "tcp")
	_, otherPort, _ := net.SplitHostPort(other)
	q, _ := ParsePort(otherPort + ":81")
	if err := r.gw.Publish([]Port{q}); err != nil {
		t.Fatal(err)
	}
	c2, err := net.DialTimeout("tcp", other, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c2.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); err == nil {
		t.Errorf("an unlistened guest port answered %d bytes", n)
	}
	c2.Close()
}

func TestPublishedUDPPort(t *testing.T) {
	r := newRig(t, nil, nil, Limits{})
	// A UDP echo in the guest on port 5353.
	pc, err := gonet.DialUDP(r.stack, &tcpip.FullAddress{NIC: 1, Port: 5353}, nil, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	hostAddr := freePort(t, "udp")
	_, hostPort, _ := net.SplitHostPort(hostAddr)
	p, _ := ParsePort(hostPort + ":5353/udp")
	if err := r.gw.Publish([]Port{p}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", hostAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("udp through the published port: %q %v", buf[:n], err)
	}
}

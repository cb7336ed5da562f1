package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// probeTimeout bounds each probe: a refused flow must fail long before it.
const probeTimeout = 10 * time.Second

// resolve prints the addresses of name, asking server (host:port) when it
// is not empty and the system's resolver otherwise. It prints
// "resolve NAME: ERROR" and fails when the lookup does.
func resolve(name, server string) error {
	r := &net.Resolver{PreferGo: true}
	if server != "" {
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", name, err)
	}
	for _, a := range addrs {
		fmt.Println(a)
	}
	return nil
}

// get fetches http[s]://HOST[:PORT]/PATH with a plain HTTP/1.0 request
// (no net/http: it would double the tool's size) and prints the body.
// HTTPS verifies the server against the system's roots
// (/etc/ssl/certs/ca-certificates.crt, or $SSL_CERT_FILE).
func get(url string) error {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok || scheme != "http" && scheme != "https" {
		return fmt.Errorf("get %s: only http:// and https:// URLs", url)
	}
	hostport, path, _ := strings.Cut(rest, "/")
	host := hostport
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		port := "80"
		if scheme == "https" {
			port = "443"
		}
		hostport = net.JoinHostPort(hostport, port)
	} else {
		host, _, _ = net.SplitHostPort(hostport)
	}
	var c net.Conn
	var err error
	if scheme == "https" {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: probeTimeout}, "tcp", hostport, &tls.Config{ServerName: host})
	} else {
		c, err = net.DialTimeout("tcp", hostport, probeTimeout)
	}
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	fmt.Fprintf(c, "GET /%s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host)
	resp, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	head, body, ok := strings.Cut(string(resp), "\r\n\r\n")
	status, _, _ := strings.Cut(head, "\r\n")
	if !ok || !strings.Contains(status, " 200 ") {
		return fmt.Errorf("get %s: %q", url, status)
	}
	fmt.Print(body)
	return nil
}

// dial connects to addr over TCP and prints how it went and how long it
// took: "connected" or the error.
func dial(addr string) error {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	took := time.Since(start).Milliseconds()
	if err != nil {
		return fmt.Errorf("dial %s: %w (after %d ms)", addr, err, took)
	}
	c.Close()
	fmt.Printf("connected %s in %d ms\n", addr, took)
	return nil
}

// udpEcho sends n datagrams to addr and checks each comes back.
func udpEcho(addr string, n int) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 2048)
	for i := 0; i < n; i++ {
		msg := fmt.Sprintf("datagram %d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(probeTimeout))
		got, err := c.Read(buf)
		if err != nil {
			return fmt.Errorf("udp echo %s, datagram %d: %w", addr, i, err)
		}
		if string(buf[:got]) != msg {
			return fmt.Errorf("udp echo %s: sent %q, got %q", addr, msg, buf[:got])
		}
	}
	fmt.Printf("udp echo %s: %d datagrams\n", addr, n)
	return nil
}

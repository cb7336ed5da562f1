package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Under an --allow-host policy, a connection to a learned address on the
// web's ports must name a server it is allowed to reach: the TLS
// ClientHello's server name on 443, the Host header on 80. The gateway
// completes the guest's handshake first, reads what the client sends
// first, checks the name against the address (policy.CheckName), and only
// then dials the host and hands it those bytes.

// nameTimeout bounds the wait for the client's first bytes.
const nameTimeout = 5 * time.Second

// maxHello bounds what is read to find the name.
const maxHello = 64 << 10

// namedPorts are the ports whose connections must name their server.
func namedPort(port uint16) bool { return port == 443 || port == 80 }

// serverName reads the client's first bytes from guest and returns them
// with the server name they carry ("" when there is none).
func serverName(guest net.Conn, port uint16) ([]byte, string) {
	guest.SetReadDeadline(time.Now().Add(nameTimeout))
	defer guest.SetReadDeadline(time.Time{})
	rec := &recorder{Conn: guest}
	if port == 443 {
		name := tlsServerName(rec)
		return rec.buf.Bytes(), name
	}
	return httpHost(rec)
}

// tlsServerName lets crypto/tls parse the ClientHello (a maintained parser
// for hostile bytes) and stops the handshake once it has the name.
func tlsServerName(rec *recorder) string {
	var name string
	stop := errors.New("stop")
	srv := tls.Server(rec, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, stop
	}})
	srv.Handshake()
	return name
}

// httpHost reads the request head (up to maxHello bytes) and returns it
// with its Host header, port removed.
func httpHost(rec *recorder) ([]byte, string) {
	br := bufio.NewReaderSize(rec, 4096)
	var head []byte
	for len(head) < maxHello {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if err != nil {
			break
		}
		if bytes.Equal(bytes.TrimRight(line, "\r\n"), nil) {
			break
		}
		if k, v, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			host := strings.TrimSpace(v)
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if _, err := netip.ParseAddr(host); err == nil {
				host = "" // an address is no name
			}
			// Everything read so far (the buffered rest too) goes to
			// the host first.
			return rec.buf.Bytes(), host
		}
	}
	return rec.buf.Bytes(), ""
}

// recorder keeps every byte read through it (up to maxHello) and drops
// every write: the TLS parser's alert never reaches the guest.
type recorder struct {
	net.Conn
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.buf.Len() >= maxHello {
		return 0, errors.New("client hello too long")
	}
	if room := maxHello - r.buf.Len(); len(p) > room {
		p = p[:room]
	}
	n, err := r.Conn.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }

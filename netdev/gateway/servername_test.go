package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"
)

// tlsEcho serves TLS on loopback with a self-signed certificate and
// echoes.
func tlsEcho(t *testing.T) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		DNSNames: []string{"allowed.test", "other.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)
	return l.Addr().String()
}

// TestTLSServerNameIsChecked: under --allow-host, a TLS connection to an
// allowed name's address gets through only when its ClientHello names
// that server; another name (a CDN co-tenant on the same address) or none
// is reset before the gateway dials anything.
func TestTLSServerNameIsChecked(t *testing.T) {
	r := newRig(t, allowHosts(t, "allowed.test"), testRecords, Limits{})
	r.hosts.add("tcp", "198.51.100.1:443", tlsEcho(t))
	if _, err := r.lookup("10.0.2.2:53", "allowed.test", 1); err != nil {
		t.Fatal(err)
	}
	try := func(serverName string) error {
		c, err := r.dial(ctxT(t), "198.51.100.1:443")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		if _, err := tc.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(tc, buf); err != nil {
			return err
		}
		if string(buf) != "ping" {
			t.Errorf("echo %q", buf)
		}
		return nil
	}
	if err := try("allowed.test"); err != nil {
		t.Fatalf("SNI allowed.test: %v", err)
	}
	dials := len(r.hosts.dialed())
	for _, name := range []string{"other.test", ""} {
		if err := try(name); err == nil {
			t.Errorf("SNI %q got through", name)
		}
	}
	if got := len(r.hosts.dialed()); got != dials {
		t.Errorf("refused server names still made the gateway dial (%d dials, want %d)", got, dials)
	}
	found := false
	for _, e := range egressEvents(t, r.log) {
		found = found || !e.Allowed && strings.Contains(e.Reason, "other.test")
	}
	if !found {
		t.Error("the egress log does not show the refused server name")
	}
}

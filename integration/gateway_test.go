package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/miekg/dns"
	"github.com/smolvm/smol/guest/initramfs"
	"github.com/smolvm/smol/internal/imagetest"
	"github.com/vishvananda/netns"
)

// fakeInternet is a network namespace standing in for the internet,
// joined to the box by a veth pair: the box's end (inetHostIP) is one of
// the host's own addresses, which the gateway's floor keeps from guests;
// the far end holds two "public" addresses with an HTTP server each, a
// TCP and UDP echo service and the DNS server the gateway is told to ask.
const (
	inetNS     = "smolinet"
	inetHostIP = "192.0.2.1"
	allowedIP  = "192.0.2.2" // allowed.test; also the DNS server and the echo services
	deniedIP   = "192.0.2.3" // denied.test
)

func fakeInternet(t *testing.T) {
	t.Helper()
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	exec.Command("ip", "netns", "del", inetNS).Run()
	sh("netns", "add", inetNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", inetNS).Run() })
	sh("link", "add", "smolinet0", "type", "veth", "peer", "name", "smolinet1", "netns", inetNS)
	sh("addr", "add", inetHostIP+"/24", "dev", "smolinet0")
	sh("link", "set", "smolinet0", "up")
	sh("-n", inetNS, "addr", "add", allowedIP+"/24", "dev", "smolinet1")
	sh("-n", inetNS, "addr", "add", deniedIP+"/24", "dev", "smolinet1")
	sh("-n", inetNS, "link", "set", "smolinet1", "up")
	sh("-n", inetNS, "link", "set", "lo", "up")

	listenIn(t, func() {
		for ip, body := range map[string]string{allowedIP: "allowed-body", deniedIP: "denied-body"} {
			l, err := net.Listen("tcp", ip+":80")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go serveHTTPBody(l, body)
		}
		l, err := net.Listen("tcp", allowedIP+":7")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		serveEcho(l)
		pc, err := net.ListenPacket("udp", allowedIP+":7")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 65536)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(buf[:n], from)
			}
		}()
		for _, ip := range []string{allowedIP, deniedIP} {
			l, err := tls.Listen("tcp", ip+":443", &tls.Config{Certificates: []tls.Certificate{testCA.serverCert}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go serveHTTPBody(l, "registry-body from "+ip)
		}
		dnsPC, err := net.ListenPacket("udp", allowedIP+":53")
		if err != nil {
			t.Fatal(err)
		}
		srv := &dns.Server{PacketConn: dnsPC, Handler: dns.HandlerFunc(answerTestNames)}
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	})
}

// listenIn runs fn on a thread inside the fake internet's namespace: the
// sockets it opens stay there after the thread goes back.
func listenIn(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.GetFromName(inetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer netns.Set(orig)
	fn()
}

var testNames = map[string]string{
	"allowed.test.":       allowedIP,
	"denied.test.":        deniedIP,
	"registry.npmjs.org.": allowedIP,
	"example.com.":        deniedIP,
	"meta.test.":          "169.254.169.254",
	"host.test.":          inetHostIP,
}

func answerTestNames(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	ip, ok := testNames[strings.ToLower(q.Name)]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", q.Name, ip))
		m.Answer = append(m.Answer, rr)
	case q.Qtype == dns.TypeAAAA:
		rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN AAAA 2001:db8::2", q.Name))
		m.Answer = append(m.Answer, rr)
	}
	w.WriteMsg(m)
}

func serveHTTPBody(l net.Listener, body string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			c.Read(buf) // one small request
			fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}()
	}
}

// testCA is a certificate authority made for the test run, and a server
// certificate it signed for the names the fake internet serves over TLS.
var testCA = func() (ca struct {
	pem        []byte
	serverCert tls.Certificate
}) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smol test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	caCert, _ := x509.ParseCertificate(der)
	ca.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	skey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	stmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "registry.npmjs.org"},
		DNSNames:  []string{"registry.npmjs.org", "example.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	sder, _ := x509.CreateCertificate(rand.Reader, stmpl, caCert, &skey.PublicKey, key)
	ca.serverCert = tls.Certificate{Certificate: [][]byte{sder}, PrivateKey: skey}
	return ca
}()

// agentInitramfs is smol's agent initramfs with nettool added, and the
// test CA as the system's only root.
func agentInitramfs(t *testing.T) string {
	t.Helper()
	a := initramfs.New()
	a.AddDir("etc/ssl", 0o755)
	a.AddDir("etc/ssl/certs", 0o755)
	a.AddFile("etc/ssl/certs/ca-certificates.crt", testCA.pem, 0o644)
	if err := a.AddHostFile("init", artifact(t, "build/agent", "guest")); err != nil {
		t.Fatal(err)
	}
	if err := a.AddHostFile("bin/nettool", artifact(t, "build/nettool", "guest")); err != nil {
		t.Fatal(err)
	}
	if err := a.AddBusybox("/bin/busybox", append([]string{"ping"}, initramfs.BusyboxApplets...)...); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "agent.cpio")
	if err := a.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGatewayNetwork: no network without --net; with it, names resolve
// through the gateway and TCP and UDP reach the fake internet; with
// --allow-host only the allowed name works, and every way around that
// (its neighbour's address, a foreign resolver, rebinding to metadata,
// IPv6, the host's own address) fails fast and is in the egress log.
func TestGatewayNetwork(t *testing.T) {
	fakeInternet(t)
	home := t.TempDir()
	initrd := agentInitramfs(t)
	run := func(t *testing.T, args []string, script string) (int, string, string) {
		t.Helper()
		full := append([]string{"run", "--cpus", "1", "--mem", "256M", "--initrd", initrd}, args...)
		return smolRun(t, home, nil, append(full, "--", "sh", "-c", script)...)
	}

	t.Run("no network without --net", func(t *testing.T) {
		code, out, stderr := run(t, nil, "ls /sys/class/net")
		if code != 0 || strings.Fields(out)[0] != "lo" || len(strings.Fields(out)) != 1 {
			t.Errorf("exit %d, interfaces %q, stderr %q", code, out, stderr)
		}
	})

	t.Run("--net", func(t *testing.T) {
		// 20 MiB out and back, checked by the guest; 100 MiB with
		// SMOL_NET_STRESS=1. In the box, a guest under sustained TCP load
		// triple-faults now and then (1 in 10 runs of 100 MiB here, twice
		// running in one CI run): the box's known failure, which its
		// QEMU guests show too (BENCHMARKS.md), and which the rerun in
		// smolRun cannot absorb at that rate.
		bulk := 20 << 20
		if os.Getenv("SMOL_NET_STRESS") == "1" {
			bulk = 100 << 20
		}
		code, out, stderr := run(t, []string{"--net", "--dns", allowedIP},
			"cat /sys/class/net/eth0/mtu && nettool resolve allowed.test && nettool get http://allowed.test/ && echo && nettool get http://denied.test/ && echo && "+
				fmt.Sprintf("nettool tcp-echo %s:7 %d 1 && nettool udp-echo %s:7 5 && ping -c 1 -W 5 %s", allowedIP, bulk, allowedIP, allowedIP))
		for _, want := range []string{"65520\n", allowedIP, "allowed-body", "denied-body", "udp echo " + allowedIP + ":7: 5 datagrams", "1 packets received"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if code != 0 {
			t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
		}
	})

	t.Run("--allow-host", func(t *testing.T) {
		egress := filepath.Join(t.TempDir(), "egress.log")
		script := strings.Join([]string{
			"nettool get http://allowed.test/; echo; echo allowed=$?",
			"nettool resolve denied.test; echo denied-name=$?",
			"nettool dial " + deniedIP + ":80; echo denied-ip=$?",
			"nettool resolve denied.test 8.8.8.8:53; echo foreign-resolver=$?",
			"nettool resolve allowed.test 203.0.113.1:53; echo foreign-allowed=$?",
			"nettool resolve meta.test; nettool dial 169.254.169.254:80; echo metadata=$?",
			"nettool dial " + inetHostIP + ":80; echo host-address=$?",
			"nettool dial [2001:db8::2]:80; echo ipv6=$?",
			"ping -c 1 -W 2 " + deniedIP + " >/dev/null; echo ping-denied=$?",
		}, "; ")
		code, out, stderr := run(t, []string{"--allow-host", "allowed.test", "--allow-host", "meta.test", "--dns", allowedIP, "--egress-log", egress}, script)
		if code != 0 {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
		}
		want := map[string]string{"allowed": "0", "denied-name": "1", "denied-ip": "1", "foreign-resolver": "1", "foreign-allowed": "0", "metadata": "1", "host-address": "1", "ipv6": "1", "ping-denied": "1"}
		for key, status := range want {
			if !strings.Contains(out, key+"="+status+"\n") {
				t.Errorf("%s: want status %s", key, status)
			}
		}
		if !strings.Contains(out, "allowed-body") {
			t.Error("the allowed fetch got no body")
		}
		// Refusals are resets, at once: never a hang.
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, "dial "+deniedIP) && !strings.Contains(line, "refused") {
				t.Errorf("denied address: %q, want connection refused", line)
			}
			if strings.Contains(line, "(after ") && !strings.Contains(line, "network is unreachable") {
				var ms int
				fmt.Sscanf(line[strings.Index(line, "(after ")+7:], "%d", &ms)
				if ms > 1000 {
					t.Errorf("a refusal took %d ms: %q", ms, line)
				}
			}
		}
		log, err := os.ReadFile(egress)
		if err != nil {
			t.Fatal(err)
		}
		for _, denial := range []string{`"dst":"` + deniedIP + `:80","allowed":false`, `"name":"denied.test. A","allowed":false`, `"dst":"169.254.169.254:80","allowed":false`, `"dst":"` + inetHostIP + `:80","allowed":false`} {
			if !strings.Contains(string(log), denial) {
				t.Errorf("egress log lacks %s", denial)
			}
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s\negress log:\n%s", out, stderr, log)
		}
	})

	// The seed's walkthrough, with the fake internet standing in for the
	// registry: the allowed host answers over HTTPS, every other host
	// fails, by name and by address.
	t.Run("the seed's three commands", func(t *testing.T) {
		seed := []string{"--net", "--allow-host", "registry.npmjs.org", "--dns", allowedIP}
		code, out, stderr := run(t, seed, "nettool get https://registry.npmjs.org/")
		if code != 0 || out != "registry-body from "+allowedIP {
			t.Errorf("the allowed host: exit %d, %q, %q", code, out, stderr)
		}
		code, out, stderr = run(t, seed, "nettool get https://example.com/")
		if code == 0 || !strings.Contains(stderr, "no such host") {
			t.Errorf("another host by name: exit %d, %q, %q", code, out, stderr)
		}
		code, out, stderr = run(t, seed, "nettool get https://"+deniedIP+"/")
		if code == 0 || !strings.Contains(stderr, "refused") {
			t.Errorf("another host by address: exit %d, %q, %q", code, out, stderr)
		}
	})

	t.Run("a machine with --allow-host", func(t *testing.T) {
		nettool, err := os.ReadFile(artifact(t, "build/nettool", "guest"))
		if err != nil {
			t.Fatal(err)
		}
		tool := imagetest.File("bin/nettool", string(nettool))
		tool.Mode = 0o755
		reg := newTestRegistry(t)
		ref := reg.push(t, "test/netmachine", image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t),
			layer(t, tool, imagetest.Symlink("bin/httpd", "busybox"), imagetest.Symlink("bin/mkdir", "busybox"))))
		netImage = ref
		mustMachine(t, home, "create", "net1", "--image", ref, "--cpus", "1", "--mem", "256M", "--storage", "1G",
			"--allow-host", "allowed.test", "--dns", allowedIP)
		t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "net1") })
		startMachine(t, home, "net1")
		if out := mustMachine(t, home, "exec", "net1", "--", "nettool", "get", "http://allowed.test/"); out != "allowed-body" {
			t.Errorf("allowed fetch in the machine: %q", out)
		}
		if code, _, stderr := machineCLI(t, home, "exec", "net1", "--", "nettool", "dial", deniedIP+":80"); code == 0 || !strings.Contains(stderr, "refused") {
			t.Errorf("denied dial in the machine: exit %d, %q", code, stderr)
		}
		events := mustMachine(t, home, "events", "net1")
		if !strings.Contains(events, `"dst":"`+deniedIP+`:80","allowed":false`) || !strings.Contains(events, `"name":"allowed.test","allowed":true`) {
			t.Errorf("machine events:\n%s", events)
		}
		mustMachine(t, home, "stop", "net1")
	})

	t.Run("-p without --net", func(t *testing.T) {
		if netImage == "" {
			t.Skip("the machine image was not built")
		}
		mustMachine(t, home, "create", "pub1", "--image", netImage, "--cpus", "1", "--mem", "256M", "--storage", "1G", "-p", "18080:80")
		t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "pub1") })
		startMachine(t, home, "pub1")
		mustMachine(t, home, "exec", "pub1", "--", "sh", "-c", "mkdir -p /www && echo hello-from-guest > /www/index.html && httpd -p 80 -h /www")
		resp, err := httpGet("127.0.0.1:18080")
		if err != nil || !strings.Contains(resp, "hello-from-guest") {
			t.Errorf("the published port: %q %v", resp, err)
		}
		// Published ports give no way out.
		if code, _, stderr := machineCLI(t, home, "exec", "pub1", "--", "nettool", "dial", allowedIP+":80"); code == 0 || !strings.Contains(stderr, "refused") {
			t.Errorf("egress from a -p only machine: exit %d, %q", code, stderr)
		}
		// A second machine on the same host port fails to start, saying so.
		mustMachine(t, home, "create", "pub2", "--image", netImage, "--cpus", "1", "--mem", "256M", "--storage", "1G", "-p", "18080:80")
		t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "pub2") })
		code, _, stderr := machineCLI(t, home, "start", "pub2")
		if code == 0 || !strings.Contains(stderr, "18080") || !strings.Contains(stderr, "in use") {
			t.Errorf("start with a taken port: exit %d, %q", code, stderr)
		}
		mustMachine(t, home, "stop", "pub1")
	})
}

// netImage is the machine image with nettool and httpd, once built.
var netImage string

// httpGet fetches / from addr with a plain HTTP/1.0 request.
func httpGet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	b, err := io.ReadAll(c)
	return string(b), err
}

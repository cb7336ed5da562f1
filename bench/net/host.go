package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"

	"github.com/smolvm/smol/bench/internal/guestrun"
)

// The host side. A veth pair gives the box the address and default
// route passt copies into its guest (passt needs a routable interface) and
// the address smol's gateway dials (opened with --allow-cidr, since the
// host's own addresses are in the gateway's floor); a TAP serves smol's
// reference run. The servers listen on every address: slirp and passt
// reach them on the host's loopback.
const (
	dummyName = "smolnetd0"
	dummyIP   = "198.18.0.1"
	dummyGW   = "198.18.0.254" // passt maps its guest's gateway address to the host's loopback
	tapName   = "smolnett0"
	tapHostIP = "10.213.3.1"
	tapGuest  = "10.213.3.2"

	sinkPort    = 7201
	sourcePort  = 7202
	connectPort = 7203
)

type environment struct {
	dir       string
	listeners []net.Listener
	links     []string
	files     []string
	routed    bool // the default route is ours
}

func setUp() (*environment, error) {
	dir, err := os.MkdirTemp("", "smol-bench-net-")
	if err != nil {
		return nil, err
	}
	env := &environment{dir: dir}
	if err := env.build(); err != nil {
		env.tearDown()
		return nil, err
	}
	return env, nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (env *environment) build() error {
	exec.Command("ip", "link", "del", dummyName).Run()
	// (A veth pair rather than a dummy interface: the box kernel has
	// veth.) Its peer end stays down-to-nowhere; only the address and
	// the route matter.
	if err := ip("link", "add", dummyName, "type", "veth", "peer", "name", dummyName+"p"); err != nil {
		return err
	}
	env.links = append(env.links, dummyName)
	if err := ip("addr", "add", dummyIP+"/24", "dev", dummyName); err != nil {
		return err
	}
	for _, l := range []string{dummyName, dummyName + "p"} {
		if err := ip("link", "set", l, "up"); err != nil {
			return err
		}
	}
	if out, _ := exec.Command("ip", "route", "show", "default").Output(); len(strings.TrimSpace(string(out))) == 0 {
		if err := ip("route", "add", "default", "via", dummyGW, "dev", dummyName); err != nil {
			return err
		}
		env.routed = true
	}
	for _, s := range []struct {
		port   int
		handle func(io.ReadWriteCloser)
	}{{sinkPort, guestrun.Sink}, {sourcePort, guestrun.Source}, {connectPort, closeAtOnce}} {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", s.port))
		if err != nil {
			return fmt.Errorf("tcp listener: %w", err)
		}
		env.listeners = append(env.listeners, l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go s.handle(c)
			}
		}()
	}
	return nil
}

// addTAP creates the reference run's TAP (smol creates it too if it is
// missing, but the host end needs its address before the guest dials).
func (env *environment) addTAP() error {
	exec.Command("ip", "link", "del", tapName).Run()
	if err := ip("tuntap", "add", "dev", tapName, "mode", "tap", "vnet_hdr"); err != nil {
		return err
	}
	env.links = append(env.links, tapName)
	if err := ip("addr", "add", tapHostIP+"/24", "dev", tapName); err != nil {
		return err
	}
	return ip("link", "set", tapName, "up")
}

func closeAtOnce(c io.ReadWriteCloser) { c.Close() }

func (env *environment) tearDown() {
	for _, l := range env.listeners {
		l.Close()
	}
	env.listeners = nil
	if env.routed {
		exec.Command("ip", "route", "del", "default", "via", dummyGW).Run()
		env.routed = false
	}
	for _, l := range env.links {
		exec.Command("ip", "link", "del", l).Run()
	}
	env.links = nil
	for _, f := range env.files {
		os.Remove(f)
	}
	env.files = nil
	if env.dir != "" {
		os.RemoveAll(env.dir)
	}
}

// passtVersion is the passt package's version, for the report.
func passtVersion(bin string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "passt").Output()
	if err != nil || len(out) == 0 {
		if _, err := exec.LookPath(bin); err != nil {
			return "(not installed: " + errors.Unwrap(err).Error() + ")"
		}
		return "(version unknown)"
	}
	return string(out)
}

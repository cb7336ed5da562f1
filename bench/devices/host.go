package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/smolvm/smol/bench/internal/guestrun"
)

// network is one VMM's TAP and the addresses on either end of it. Each VMM
// has its own TAP and subnet, so neither can reach the other's servers by
// accident of routing.
type network struct {
	tap, hostIP, guestIP string
}

var (
	smolNet = network{"smolbench0", "10.213.1.1", "10.213.1.2"}
	qemuNet = network{"smolbenchq0", "10.213.2.1", "10.213.2.2"}
)

// Ports the host serves for the guest. A sink reads everything until the
// guest half-closes, then closes: the guest's send time ends when its last
// byte has arrived. A source writes until the guest closes.
const (
	tcpSinkPort     = 7001
	tcpSourcePort   = 7002
	vsockSinkPort   = 5001
	vsockSourcePort = 5002
	guestCID        = 3
	hostCID         = 2 // VMADDR_CID_HOST: where a guest reaches its host
	// shareTag is the shared directory's mount tag for both VMMs (smol
	// names its first -v so).
	shareTag = "smol0"
)

// environment is what the bench sets up on the host and removes at the end.
type environment struct {
	dir       string // private temporary directory
	disk      string // the raw image both VMMs get
	share     string // the directory both VMMs share with the guest (virtio-9p)
	vsockPath string // smol's vsock socket; the sink and source listen at _PORT
	files     []string
	listeners []io.Closer
	taps      []string
	once      sync.Once
}

func setUp(diskMiB, walkFiles int) (*environment, error) {
	dir, err := os.MkdirTemp("", "smol-bench-devices-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	env := &environment{dir: dir, disk: filepath.Join(dir, "disk.img"), share: filepath.Join(dir, "share"), vsockPath: filepath.Join(dir, "v.sock")}
	if err := env.build(diskMiB, walkFiles); err != nil {
		env.tearDown()
		return nil, err
	}
	return env, nil
}

func (env *environment) build(diskMiB, walkFiles int) error {
	if err := writeImage(env.disk, diskMiB); err != nil {
		return err
	}
	// The shared directory: walkFiles empty files for the walk, 100 to a
	// directory (the guest writes its big file beside them).
	many := filepath.Join(env.share, "many")
	if err := os.MkdirAll(many, 0o755); err != nil {
		return err
	}
	for i := 0; i < walkFiles; i++ {
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Join(many, fmt.Sprintf("d%02d", i/100)), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("d%02d", i/100), fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			return err
		}
	}
	for _, n := range []network{smolNet, qemuNet} {
		if err := env.addTAP(n); err != nil {
			return err
		}
	}
	serve := func(l acceptor, err error, handle func(io.ReadWriteCloser)) error {
		if err != nil {
			return err
		}
		env.listeners = append(env.listeners, l)
		go acceptLoop(l, handle)
		return nil
	}
	for _, s := range []struct {
		port   int
		handle func(io.ReadWriteCloser)
	}{{tcpSinkPort, guestrun.Sink}, {tcpSourcePort, guestrun.Source}} {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", s.port))
		if err := serve(tcpAcceptor{l}, wrap(err, "tcp listener"), s.handle); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		port   uint32
		handle func(io.ReadWriteCloser)
	}{{vsockSinkPort, guestrun.Sink}, {vsockSourcePort, guestrun.Source}} {
		l, err := net.Listen("unix", fmt.Sprintf("%s_%d", env.vsockPath, s.port))
		if err := serve(tcpAcceptor{l}, wrap(err, "unix listener for smol's vsock"), s.handle); err != nil {
			return err
		}
		vl, err := listenVsock(s.port)
		if err := serve(vl, err, s.handle); err != nil {
			return err
		}
	}
	return nil
}

func wrap(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// writeImage creates the raw disk with a non-zero pattern in every block,
// so that reads are served from real data for both VMMs, never from holes.
func writeImage(path string, mib int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*31 + 17)
	}
	for i := 0; i < mib; i++ {
		if _, err := f.Write(block); err != nil {
			return fmt.Errorf("disk image %s: %w", path, err)
		}
	}
	return nil
}

// addTAP creates a persistent TAP with the host's address; the VMM attaches
// to it. A leftover of an interrupted run is replaced.
func (env *environment) addTAP(n network) error {
	exec.Command("ip", "link", "del", n.tap).Run()
	for _, args := range [][]string{
		{"tuntap", "add", n.tap, "mode", "tap"},
		{"addr", "add", n.hostIP + "/24", "dev", n.tap},
		{"link", "set", n.tap, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		if args[0] == "tuntap" {
			env.taps = append(env.taps, n.tap)
		}
	}
	return nil
}

func (env *environment) tearDown() {
	env.once.Do(func() {
		for _, l := range env.listeners {
			l.Close()
		}
		for _, t := range env.taps {
			exec.Command("ip", "link", "del", t).Run()
		}
		for _, f := range env.files {
			os.Remove(f)
		}
		os.RemoveAll(env.dir)
	})
}

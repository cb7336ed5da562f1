// Package guestrun boots one benchmark guest under some VMM and collects
// the measurements it prints on its console ("nettool-result NAME VALUE
// UNIT" lines, from guest/nettool), killing it if it does not come up or
// does not finish; and it has the host ends of the guest's streams.
package guestrun

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"slices"

	"github.com/smolvm/smol/guest/initramfs"
)

// Options say how to judge one run.
type Options struct {
	// Marker is what the guest prints first: the boot worked.
	Marker string
	// Want is how many measurements a complete run prints.
	Want int
	// Limit bounds the whole run; BootLimit the wait for Marker.
	Limit, BootLimit time.Duration
}

// consoleTail is how many of a failed run's last console lines are shown,
// maxStderr how many bytes of the VMM's stderr (a goroutine dump).
const (
	consoleTail = 40
	maxStderr   = 256 << 10
)

var resultLine = regexp.MustCompile(`nettool-result (\S+) ([0-9.]+) `)

// Run starts cmd (a VMM whose stdout is the guest's console) and returns
// the measurements the guest printed. A run that misses some returns those
// it has and an error with the guest's complaints (its "nettool:" lines)
// and the end of its console.
// QEMUDefaultDevices are smol's default devices (entropy, and a balloon
// with free page reporting) on QEMU microvm's virtio-mmio: the peer gets
// them too, so that a comparison is of like with like.
var QEMUDefaultDevices = []string{"-device", "virtio-rng-device", "-device", "virtio-balloon-device,free-page-reporting=on"}

func Run(cmd *exec.Cmd, opt Options) (map[string]float64, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	// A guest that never reaches its rc is killed early; one that hangs
	// in a measurement, at the limit.
	var up atomic.Bool
	var killed atomic.Value
	kill := func(why string) {
		killed.CompareAndSwap(nil, why)
		// SIGQUIT first: a Go VMM (smol) then writes every goroutine's
		// stack to stderr, which the error below shows; anything else
		// dies of it, or of the SIGKILL after.
		cmd.Process.Signal(syscall.SIGQUIT)
		time.AfterFunc(3*time.Second, func() { cmd.Process.Kill() })
	}
	timer := time.AfterFunc(opt.Limit, func() { kill(fmt.Sprintf("killed after %v", opt.Limit)) })
	defer timer.Stop()
	bootTimer := time.AfterFunc(opt.BootLimit, func() {
		if !up.Load() {
			kill(fmt.Sprintf("killed: no %q on the console after %v", opt.Marker, opt.BootLimit))
		}
	})
	defer bootTimer.Stop()
	got := map[string]float64{}
	var complaints, tail []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.Contains(line, opt.Marker) {
			up.Store(true)
		}
		if m := resultLine.FindStringSubmatch(line); m != nil {
			if x, err := strconv.ParseFloat(m[2], 64); err == nil {
				got[m[1]] = x
			}
		} else if strings.Contains(line, "nettool:") {
			complaints = append(complaints, line)
		}
		if tail = append(tail, line); len(tail) > consoleTail {
			tail = tail[1:]
		}
	}
	// A line too long for the scanner ends the loop: keep draining, so the
	// VMM never blocks on a full console pipe.
	io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	if len(got) == opt.Want {
		return got, nil
	}
	if why, ok := killed.Load().(string); ok {
		werr = errors.New(why)
	}
	// The guest's own complaints, then how its console ended (a kernel
	// oops, a hang in some step).
	detail := append(complaints, "...")
	detail = append(detail, tail...)
	errText := strings.TrimSpace(stderr.String())
	if len(errText) > maxStderr {
		errText = "..." + errText[len(errText)-maxStderr:]
	}
	return got, fmt.Errorf("%d of %d measurements (exit: %v); stderr: %s; console:\n  %s",
		len(got), opt.Want, werr, errText, strings.Join(detail, "\n  "))
}

// Sink reads everything until the guest half-closes, then closes: the
// guest's send time ends when its last byte has arrived.
func Sink(c io.ReadWriteCloser) {
	defer c.Close()
	io.Copy(io.Discard, c)
}

// Source writes until the guest closes the connection.
func Source(c io.ReadWriteCloser) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	for i := range buf {
		buf[i] = byte(i*13 + 5)
	}
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// Initramfs writes a benchmark guest's initramfs to a temporary file
// named after prefix: smol's test init, busybox (with ip) and nettool,
// with rc as /etc/rc. The caller removes the file.
func Initramfs(prefix, initPath, nettoolPath, rc string) (string, error) {
	a := initramfs.New()
	if err := a.AddHostFile("init", initPath); err != nil {
		return "", fmt.Errorf("guest init: %w", err)
	}
	if err := a.AddHostFile("bin/nettool", nettoolPath); err != nil {
		return "", fmt.Errorf("guest nettool: %w", err)
	}
	if err := a.AddBusybox("/bin/busybox", slices.Concat(initramfs.BusyboxApplets, []string{"ip"})...); err != nil {
		return "", fmt.Errorf("guest busybox: %w", err)
	}
	a.AddFile("etc/rc", []byte(rc), 0o755)
	f, err := os.CreateTemp("", prefix+"-*.cpio")
	if err != nil {
		return "", err
	}
	f.Close()
	if err := a.WriteFile(f.Name()); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("initramfs: %w", err)
	}
	return f.Name(), nil
}

// Figure is one measurement a guest reports (Key, as nettool names it)
// and how a benchmark prints it.
type Figure struct {
	Key, Label, Unit string
}

// Describe is one run's figures on one line, "-" for those it missed.
func Describe(figures []Figure, got map[string]float64) string {
	var parts []string
	for _, f := range figures {
		if x, ok := got[f.Key]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", f.Key, x))
		} else {
			parts = append(parts, f.Key+" -")
		}
	}
	return strings.Join(parts, ", ")
}

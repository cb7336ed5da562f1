package integration

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/internal/syncbuf"
)

func TestBlockDeviceExt4RoundTrip(t *testing.T) {
	kernel := artifact(t, "build/vmlinux", "kernel")
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	// The guest makes the filesystem with the host's own mkfs.ext4.
	initrd := guestInitramfs(t, `mkfs.ext4 -q -F /dev/vda || echo mkfs-failed
mkdir -p /mnt
mount -t ext4 /dev/vda /mnt || echo mount-failed
echo "written by the guest" | dd of=/mnt/hello.txt conv=fsync 2>/dev/null
dd if=/dev/urandom of=/mnt/blob bs=1M count=8 conv=fsync 2>/dev/null
echo 3 > /proc/sys/vm/drop_caches
echo "guest-sum $(sha256sum /mnt/blob | cut -d' ' -f1)"
echo "guest-read $(cat /mnt/hello.txt)"
echo "serial $(cat /sys/block/vda/serial)"
umount /mnt
poweroff -f
`, "/usr/sbin/mkfs.ext4")
	exit, out, err := boot(t, smol.Config{Kernel: kernel, Initrd: initrd, CPUs: 2, Memory: 256 << 20,
		Disks: []smol.Disk{{Path: img, Serial: "smol-test-disk"}}})
	if err != nil || exit.Reason != "poweroff" {
		t.Fatalf("exit %+v, %v; console:\n%s", exit, err, out)
	}
	if !strings.Contains(out, "guest-read written by the guest") || !strings.Contains(out, "serial smol-test-disk") {
		t.Fatalf("guest could not use the disk; console:\n%s", out)
	}
	// After the VM exits, the data is in the image file, and it is ext4.
	if fs, err := exec.Command("blkid", "-o", "value", "-s", "TYPE", img).Output(); err != nil || strings.TrimSpace(string(fs)) != "ext4" {
		t.Fatalf("blkid says %q, %v; want ext4", fs, err)
	}
	got, err := exec.Command("debugfs", "-R", "cat /hello.txt", img).Output()
	if err != nil || string(got) != "written by the guest\n" {
		t.Fatalf("debugfs cat /hello.txt = %q, %v", got, err)
	}
	blob, err := exec.Command("debugfs", "-R", "cat /blob", img).Output()
	if err != nil || len(blob) != 8<<20 {
		t.Fatalf("debugfs cat /blob: %d bytes, %v", len(blob), err)
	}
	if want := fmt.Sprintf("guest-sum %x", sha256.Sum256(blob)); !strings.Contains(out, want) {
		t.Fatalf("the blob in the image differs from what the guest wrote (%s); console:\n%s", want, out)
	}
}

func TestReadOnlyDiskRefusesWrites(t *testing.T) {
	kernel := artifact(t, "build/vmlinux", "kernel")
	img := filepath.Join(t.TempDir(), "ro.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	initrd := guestInitramfs(t, `echo "ro=$(cat /sys/block/vda/ro)"
if echo overwritten | dd of=/dev/vda oflag=direct 2>/dev/null; then echo write-succeeded; else echo write-refused; fi
poweroff -f
`)
	_, out, err := boot(t, smol.Config{Kernel: kernel, Initrd: initrd, CPUs: 1, Memory: 256 << 20,
		Disks: []smol.Disk{{Path: img, ReadOnly: true}}})
	if err != nil || !strings.Contains(out, "ro=1") || !strings.Contains(out, "write-refused") {
		t.Fatalf("%v; console:\n%s", err, out)
	}
	data, _ := os.ReadFile(img)
	if strings.Contains(string(data), "overwritten") {
		t.Fatal("a read-only disk was written")
	}
}

func TestHardwareRNGGivesData(t *testing.T) {
	kernel := artifact(t, "build/vmlinux", "kernel")
	initrd := guestInitramfs(t, `echo "rng=$(cat /sys/class/misc/hw_random/rng_current)"
echo "bytes=$(dd if=/dev/hwrng bs=4096 count=4 2>/dev/null | wc -c)"
poweroff -f
`)
	_, out, err := boot(t, smol.Config{Kernel: kernel, Initrd: initrd, CPUs: 1, Memory: 256 << 20})
	if err != nil || !strings.Contains(out, "rng=virtio_rng") || !strings.Contains(out, "bytes=16384") {
		t.Fatalf("%v; console:\n%s", err, out)
	}
}

// echoListener serves an echo on a Unix socket until the test ends.
func echoListener(t *testing.T, path string) {
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	serveEcho(l)
}

// serveEcho echoes every connection l accepts, until l is closed.
func serveEcho(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
}

// hostEcho connects to the guest's port through the device's Unix socket,
// sends size bytes and checks the echo, failing at deadline rather than
// hanging on a guest that stopped.
func hostEcho(path string, port, size int, seed uint64, deadline time.Time) error {
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	fmt.Fprintf(c, "CONNECT %d\n", port)
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "OK ") {
		return fmt.Errorf("CONNECT %d: %q, %v", port, line, err)
	}
	sent, got := sha256.New(), sha256.New()
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyN(got, r, int64(size))
		done <- err
	}()
	rng := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, 64<<10)
	for left := size; left > 0; {
		n := min(left, len(buf))
		for i := range buf[:n] {
			buf[i] = byte(rng.Uint32())
		}
		sent.Write(buf[:n])
		if _, err := c.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	if err := <-done; err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if string(sent.Sum(nil)) != string(got.Sum(nil)) {
		return fmt.Errorf("echo differs")
	}
	return nil
}

func TestVsockEchoBothWays(t *testing.T) {
	kernel := artifact(t, "build/vmlinux", "kernel")
	initrd := guestInitramfs(t, `nettool serve 6000 &
nettool echo 2 5000 1048576 1 && nettool echo 2 5000 65536 32
read line
poweroff -f
`, "build/nettool")
	retryIfGuestDies(t, func() error {
		sock := filepath.Join(t.TempDir(), "v.sock")
		echoListener(t, sock+"_5000")
		in, typer := io.Pipe()
		out := &syncbuf.Buffer{}
		m, err := smol.Start(smol.Config{Kernel: kernel, Initrd: initrd, CPUs: 2, Memory: 512 << 20,
			Console: out, ConsoleInput: in, Vsock: &smol.Vsock{Path: sock}})
		if err != nil {
			return err
		}
		defer m.Close()
		defer watchGuest(m, out, 3*time.Minute)()
		deadline := time.Now().Add(bootTimeout)
		echoDeadline := time.Now().Add(150 * time.Second)
		// nettool says so once it listens: a connection before that is
		// refused (a fixed sleep here lost that race in the box).
		if !out.WaitFor("nettool: serving on port 6000", deadline) {
			m.Stop()
			return &guestDied{fmt.Sprintf("guest did not start its vsock server; console:\n%s", out.String())}
		}
		// Host to guest: one 100 MiB stream, then 32 concurrent ones.
		var echoErrs []error
		if err := hostEcho(sock, 6000, 100<<20, 1, echoDeadline); err != nil {
			echoErrs = append(echoErrs, fmt.Errorf("host->guest 100 MiB: %w", err))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := 0; i < 32; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := hostEcho(sock, 6000, 256<<10, uint64(i)+2, echoDeadline); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			echoErrs = append(echoErrs, fmt.Errorf("host->guest concurrent: %w", err))
		}
		// Guest to host.
		if !out.WaitFor("echo-ok 32 connections", echoDeadline) {
			echoErrs = append(echoErrs, errors.New("guest->host echo did not finish"))
		}
		if len(echoErrs) > 0 {
			t.Logf("vsock stalled or failed; state now:\n%s", stallReport(m))
		}
		io.WriteString(typer, "\n")
		if err := waitPoweroff(m, out); err != nil {
			return err // a dead guest explains any echo failure
		}
		if len(echoErrs) > 0 {
			return fmt.Errorf("%w; console:\n%s", errors.Join(echoErrs...), out.String())
		}
		return nil
	})
}

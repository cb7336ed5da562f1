package tap

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// createOrSkip creates a TAP, or skips the test where this host cannot.
func createOrSkip(t *testing.T, name string) *TAP {
	t.Helper()
	if _, err := os.Stat(tunPath); err != nil {
		t.Skipf("no TAP test: %v", err)
	}
	tp, err := Create(name)
	if errors.Is(err, ErrNeedsNetAdmin) || errors.Is(err, ErrNoTunDevice) {
		t.Skipf("no TAP test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}

func testName(prefix string) string { return fmt.Sprintf("%s%d", prefix, os.Getpid()%100000) }

var guestMAC = net.HardwareAddr{0x02, 0x5e, 0x00, 0x00, 0x00, 0x02}

// arpRequest is a virtio-net header and an ARP request from (mac, ip)
// asking for target.
func arpRequest(mac net.HardwareAddr, ip, target net.IP) []byte {
	p := make([]byte, HeaderSize+42)
	f := p[HeaderSize:]
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], 0x0806)
	binary.BigEndian.PutUint16(f[14:], 1)      // Ethernet
	binary.BigEndian.PutUint16(f[16:], 0x0800) // IPv4
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], 1) // request
	copy(f[22:28], mac)
	copy(f[28:32], ip.To4())
	copy(f[38:42], target.To4())
	return p
}

func TestCreateConfigureAndExchange(t *testing.T) {
	name := testName("smolt")
	tp := createOrSkip(t, name)
	if tp.Name() != name {
		t.Fatalf("name %q, want %q", tp.Name(), name)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		t.Error("link not up")
	}
	if tp.SupportedOffloads()&guestOffloads != guestOffloads || tp.SupportedOffloads()&hostOffloads != hostOffloads {
		t.Errorf("supported offloads %#x", tp.SupportedOffloads())
	}
	if err := tp.SetOffloads(featureGuestCsum | featureGuestTSO4 | featureGuestTSO6); err != nil {
		t.Fatal(err)
	}

	hostIP, guestIP := net.IPv4(10, 254, 77, 1), net.IPv4(10, 254, 77, 2)
	if err := tp.Configure(net.IPNet{IP: hostIP, Mask: net.CIDRMask(24, 32)}); err != nil {
		t.Fatal(err)
	}
	if err := tp.Configure(net.IPNet{IP: hostIP, Mask: net.CIDRMask(24, 32)}); err != nil {
		t.Fatalf("configuring the same address twice: %v", err)
	}

	// A second open of the same interface is refused; so is a non-TAP.
	if _, err := Create(name); !errors.Is(err, ErrBusy) {
		t.Errorf("second Create: %v, want ErrBusy", err)
	}
	if _, err := Create("lo"); !errors.Is(err, ErrNotTAP) {
		t.Errorf("Create(lo): %v, want ErrNotTAP", err)
	}

	// Waiting is cancellable.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	for tp.WaitReadable(ctx) == nil { // drain whatever the kernel sent (IPv6 router solicitations)
		tp.ReadPacket([][]byte{make([]byte, 70000)})
	}
	cancel()

	// The host kernel answers an ARP request sent through the TAP.
	req := arpRequest(guestMAC, guestIP, hostIP)
	if n, err := tp.WritePacket([][]byte{req[:HeaderSize], req[HeaderSize:20], req[20:]}); err != nil || n != len(req) {
		t.Fatalf("write ARP request: %d, %v", n, err)
	}
	reply := readUntil(t, tp, func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0806 && binary.BigEndian.Uint16(f[20:]) == 2
	})
	if !bytes.Equal(reply[0:6], guestMAC) || !bytes.Equal(reply[38:42], guestIP.To4()) || !bytes.Equal(reply[28:32], hostIP.To4()) {
		t.Errorf("ARP reply %x", reply[:42])
	}
	if !bytes.Equal(reply[22:28], link.Attrs().HardwareAddr) {
		t.Errorf("ARP reply names %x, the TAP is %v", reply[22:28], link.Attrs().HardwareAddr)
	}

	// A malformed header is refused by the kernel.
	bad := append([]byte(nil), req...)
	bad[0], bad[1] = 1, 1 // NEEDS_CSUM + TCPv4 GSO with a zero segment size and offsets past the frame
	binary.LittleEndian.PutUint16(bad[6:], 4000)
	if _, err := tp.WritePacket([][]byte{bad}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("write with a bad header: %v, want EINVAL", err)
	}

	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(name); err == nil {
		t.Error("interface still exists after Close")
	}
}

// readUntil reads frames (without their header) until match accepts one.
func readUntil(t *testing.T, tp *TAP, match func([]byte) bool) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hdr, buf := make([]byte, HeaderSize), make([]byte, 65536)
	for {
		n, err := tp.ReadPacket([][]byte{hdr, buf})
		if errors.Is(err, syscall.EAGAIN) {
			if err := tp.WaitReadable(ctx); err != nil {
				t.Fatalf("no matching frame: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n >= HeaderSize && match(buf[:n-HeaderSize]) {
			return append([]byte(nil), buf[:n-HeaderSize]...)
		}
	}
}

package net_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	stdnet "net"
	"os"
	"testing"
	"time"

	"github.com/smolvm/smol/netdev/tap"
	"github.com/smolvm/smol/virtio"
	vnet "github.com/smolvm/smol/virtio/net"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

var _ vnet.Backend = (*tap.TAP)(nil)

// TestThroughARealTAP plays the guest driver of a device whose backend is a
// real TAP with an address on the host side: the guest resolves the host
// with ARP and pings it with an ICMP echo request whose checksum it leaves
// to the host (NEEDS_CSUM, checksum field zero), and the host kernel's
// replies arrive in receive buffers.
func TestThroughARealTAP(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TAP test: %v", err)
	}
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	tp, err := tap.Create("smoln" + itoa(os.Getpid()%100000))
	if errors.Is(err, tap.ErrNeedsNetAdmin) || errors.Is(err, tap.ErrNoTunDevice) {
		t.Skipf("no TAP test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	hostIP, guestIP := stdnet.IPv4(10, 254, 78, 1).To4(), stdnet.IPv4(10, 254, 78, 2).To4()
	if err := tp.Configure(stdnet.IPNet{IP: hostIP, Mask: stdnet.CIDRMask(24, 32)}); err != nil {
		tp.Close()
		t.Fatal(err)
	}
	guestMAC := [6]byte(tap.MACFromName(tp.Name()))
	dev, err := vnet.New(tp, vnet.Options{MAC: guestMAC})
	if err != nil {
		tp.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })

	mmio := virtio.NewMMIO(dev, mem, virtiotest.NewIRQ())
	drv := virtiotest.Init(t, mmio, mem, virtiotest.Options{})
	rx, tx := drv.Queues[vnet.RxQueue], drv.Queues[vnet.TxQueue]
	for range 16 {
		rx.AddChain(nil, []uint32{2048})
	}
	drv.Notify(vnet.RxQueue)

	send := func(h vnet.Header, frame []byte) {
		t.Helper()
		hdr := make([]byte, vnet.HeaderSize)
		h.Put(hdr)
		tx.AddChain([][]byte{hdr, frame}, nil)
		drv.Notify(vnet.TxQueue)
		tx.WaitUsed(1, 5*time.Second)
	}
	// receive waits for a frame match accepts, reposting buffers.
	receive := func(what string, match func([]byte) bool) []byte {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, u := range rx.Used() {
				rx.AddChain(nil, []uint32{2048})
				drv.Notify(vnet.RxQueue)
				h, err := vnet.ParseHeader(u.Data)
				if err != nil {
					t.Fatalf("received %d bytes: %v", len(u.Data), err)
				}
				if h.NumBuffers != 1 {
					t.Errorf("num_buffers %d", h.NumBuffers)
				}
				if f := u.Data[vnet.HeaderSize:]; match(f) {
					return f
				}
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("no %s from the host (stats %+v)", what, dev.Stats())
		return nil
	}

	send(vnet.Header{}, arpRequest(guestMAC, guestIP, hostIP))
	reply := receive("ARP reply", func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0806 && binary.BigEndian.Uint16(f[20:]) == 2
	})
	if !bytes.Equal(reply[0:6], guestMAC[:]) || !bytes.Equal(reply[28:32], hostIP) || !bytes.Equal(reply[38:42], guestIP) {
		t.Fatalf("ARP reply %x", reply[:42])
	}
	hostMAC := reply[22:28]

	payload := []byte("smol virtio-net says hello")
	echo := icmpEcho(guestMAC[:], hostMAC, guestIP, hostIP, 0x5a5a, 7, payload)
	send(vnet.Header{Flags: vnet.HeaderNeedsCsum, CsumStart: 34, CsumOffset: 2}, echo)
	pong := receive("ICMP echo reply", func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 1 && f[34] == 0
	})
	if !bytes.Equal(pong[26:30], hostIP) || !bytes.Equal(pong[30:34], guestIP) {
		t.Errorf("echo reply from %v to %v", stdnet.IP(pong[26:30]), stdnet.IP(pong[30:34]))
	}
	ihl := int(pong[14]&0xf) * 4
	icmp := pong[14+ihl : 14+int(binary.BigEndian.Uint16(pong[16:]))]
	if binary.BigEndian.Uint16(icmp[4:]) != 0x5a5a || binary.BigEndian.Uint16(icmp[6:]) != 7 || !bytes.Equal(icmp[8:], payload) {
		t.Errorf("echo reply %x", icmp)
	}
	if checksum(icmp) != 0 {
		t.Errorf("echo reply checksum does not verify: %x", icmp)
	}
	if st := dev.Stats(); st.TxFrames != 2 || st.TxDropped != 0 || st.BackendErrors != 0 || st.RxFrames < 2 {
		t.Errorf("stats %+v", st)
	}
}

func arpRequest(mac [6]byte, ip, target stdnet.IP) []byte {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac[:])
	binary.BigEndian.PutUint16(f[12:], 0x0806)
	binary.BigEndian.PutUint16(f[14:], 1)
	binary.BigEndian.PutUint16(f[16:], 0x0800)
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], 1)
	copy(f[22:28], mac[:])
	copy(f[28:32], ip)
	copy(f[38:42], target)
	return f
}

// icmpEcho builds an Ethernet/IPv4/ICMP echo request whose ICMP checksum
// is left zero for the host to complete (the partial sum of ICMP is 0: it
// has no pseudo-header).
func icmpEcho(src, dst []byte, srcIP, dstIP stdnet.IP, id, seq uint16, payload []byte) []byte {
	f := make([]byte, 14+20+8+len(payload))
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	ip[8], ip[9] = 64, 1
	copy(ip[12:16], srcIP)
	copy(ip[16:20], dstIP)
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	icmp := f[34:]
	icmp[0] = 8
	binary.BigEndian.PutUint16(icmp[4:], id)
	binary.BigEndian.PutUint16(icmp[6:], seq)
	copy(icmp[8:], payload)
	return f
}

// checksum is the Internet checksum (RFC 1071); 0 over data that includes
// a correct checksum.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

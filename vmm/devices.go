package vmm

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/netdev/gateway"
	"github.com/smolvm/smol/netdev/policy"
	"github.com/smolvm/smol/netdev/tap"
	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/balloon"
	"github.com/smolvm/smol/virtio/blk"
	"github.com/smolvm/smol/virtio/input"
	vnet "github.com/smolvm/smol/virtio/net"
	"github.com/smolvm/smol/virtio/ninep"
	"github.com/smolvm/smol/virtio/rng"
	"github.com/smolvm/smol/virtio/vsock"
	"github.com/smolvm/smol/vmm/memory"
)

// Devices is the plain description of a machine's devices, from which the
// device manager builds every one of them. It holds no open files, so it
// can be written to a machine record or a snapshot and given to New again;
// Machine.Devices returns it with every identity (MAC, CID) filled in.
// The legacy PC devices (serial, i8042, ACPI power, boot timer, pvpanic)
// are always there and need no description.
type Devices struct {
	Disks []Disk `json:"disks,omitempty"` // /dev/vda, /dev/vdb, ... in order
	// Shares are host directories the guest mounts by their tags
	// (virtio-9p, package virtio/ninep).
	Shares []Share `json:"shares,omitempty"`
	Net    *Net    `json:"net,omitempty"`
	Vsock  *Vsock  `json:"vsock,omitempty"`
	// Entropy adds a virtio-rng device: without one a guest kernel can
	// wait a long time for getrandom() to unblock.
	Entropy bool `json:"entropy,omitempty"`
	// Balloon adds a virtio-balloon device with free page reporting:
	// memory the guest frees goes back to the host.
	Balloon bool `json:"balloon,omitempty"`
	// GPU adds a display (virtio-gpu, package devices/gpu).
	GPU *GPU `json:"gpu,omitempty"`
}

// GPU is a virtio-gpu display: the guest gets /dev/dri/card0 and /dev/fb0
// of this size, and the host reads the screen (Machine.GPU); with it come
// a virtio-input keyboard and tablet (Machine.Keyboard, Machine.Tablet).
type GPU struct {
	// Width and Height are the display's size; zero means 1280x800.
	Width  uint32 `json:"width,omitempty"`
	Height uint32 `json:"height,omitempty"`
	// Virgl adds 3D: the guest's OpenGL (Mesa's virgl driver) runs on
	// the host through virglrenderer, in the smol-gpu helper, a
	// sandboxed process of its own (package devices/gpu/virgl).
	Virgl bool `json:"virgl,omitempty"`
	// Helper is smol-gpu's path; empty: beside the running executable,
	// then on PATH (virgl.FindHelper).
	Helper string `json:"helper,omitempty"`
}

// Disk is a raw disk image given to the guest as a virtio block device.
type Disk struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Serial is what the guest reads as the disk's ID (at most 20 ASCII
	// characters); empty means one derived from the file.
	Serial string `json:"serial,omitempty"`
}

// Share is a host directory served to the guest (virtio-9p): the guest
// mounts it with `mount -t 9p -o trans=virtio,version=9p2000.L TAG DIR`.
// Nothing outside Path is reachable from it; ReadOnly is enforced on the
// host.
type Share struct {
	Path     string `json:"path"`
	Tag      string `json:"tag"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Vsock gives the guest a virtio-vsock device whose host side is Unix
// sockets: a guest connection to host port P reaches a listener at
// Path_P; a host program connects to Path and writes "CONNECT P\n" to
// reach guest port P.
type Vsock struct {
	Path string `json:"path"`
	CID  uint64 `json:"cid,omitempty"` // the guest's context ID; 0 means 3
}

// Net gives the guest a virtio-net device. By default its backend is
// smol's userspace gateway (package netdev/gateway): rootless, every
// outbound TCP and UDP flow re-originated as a socket of this process
// under the egress policy, DNS answered by the gateway. With TAP set it is
// a host TAP interface instead (created if it does not exist, which needs
// CAP_NET_ADMIN), configured by whoever set it up, with no policy.
type Net struct {
	TAP string `json:"tap,omitempty"`
	// MAC is the guest's MAC address; "" derives a stable one from TAP,
	// or is GatewayGuestMAC.
	MAC string `json:"mac,omitempty"`
	// AllowHosts and AllowCIDRs are the gateway's egress rules
	// (--allow-host, --allow-cidr; package netdev/policy): with any,
	// everything else is denied.
	AllowHosts []string `json:"allow_hosts,omitempty"`
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
	// DNS lists the gateway's upstream resolvers (host:port); empty means
	// the nameservers of the host's /etc/resolv.conf.
	DNS []string `json:"dns,omitempty"`
	// Publish lists the gateway's published ports,
	// [HOSTADDR:]HOSTPORT:GUESTPORT[/tcp|/udp] (-p).
	Publish []string `json:"publish,omitempty"`
	// NoEgress denies every outbound flow and name: the guest has the
	// network only for its published ports.
	NoEgress bool `json:"no_egress,omitempty"`
}

// GatewayGuestMAC is the guest's MAC address behind the gateway unless
// Net.MAC says otherwise.
const GatewayGuestMAC = "52:54:00:12:34:56"

// DeviceInfo says where the device manager put a device and what
// identifies it to the guest.
type DeviceInfo struct {
	Kind     string // "blk", "net", "vsock", "rng", "balloon", "gpu", "9p", "serial", "i8042", "power", "boot-timer", "pvpanic", "ioapic", "port-b"
	Bus      string // "mmio" or "pio"
	Addr     uint64 // first register (MMIO address or port)
	Size     uint64
	GSI      uint32 // I/O APIC pin; 0 for devices without an interrupt
	Identity string // what the guest sees of it: disk serial, MAC, CID
}

// openVirtio builds the virtio devices spec asks for, in guest order:
// disks first so that the first disk is /dev/vda, the balloon last. Every
// mistake (a missing disk, a disk in use by another VM, a bad socket path)
// is found here, before the VM exists. It returns spec with the identities
// it chose filled in.
func openVirtio(spec Devices, mem *memory.Guest, egressLog io.Writer) (devs []virtio.Device, resolved Devices, err error) {
	defer func() {
		if err != nil {
			for _, d := range devs {
				closeDevice(d)
			}
			devs = nil
		}
	}()
	resolved = spec
	resolved.Disks = append([]Disk(nil), spec.Disks...)
	for i, d := range spec.Disks {
		disk, err := blk.Open(d.Path, d.ReadOnly)
		if err != nil {
			return devs, spec, err
		}
		dev, err := blk.New(disk, blk.Options{Serial: d.Serial})
		if err != nil {
			disk.Close()
			return devs, spec, err
		}
		resolved.Disks[i].Serial = dev.Serial()
		devs = append(devs, dev)
	}
	for _, s := range spec.Shares {
		dev, err := ninep.New(s.Path, s.Tag, s.ReadOnly)
		if err != nil {
			return devs, spec, fmt.Errorf("shared directory %s: %w", s.Path, err)
		}
		devs = append(devs, dev)
	}
	if spec.Net != nil {
		dev, mac, err := openNet(*spec.Net, egressLog)
		if err != nil {
			return devs, spec, err
		}
		n := *spec.Net
		n.MAC = mac
		resolved.Net = &n
		devs = append(devs, dev)
	}
	if spec.Vsock != nil {
		dev, err := vsock.New(vsock.Config{CID: spec.Vsock.CID, UDSPath: spec.Vsock.Path})
		if err != nil {
			return devs, spec, err
		}
		resolved.Vsock = &Vsock{Path: spec.Vsock.Path, CID: dev.CID()}
		devs = append(devs, dev)
	}
	if spec.Entropy {
		devs = append(devs, rng.New())
	}
	if spec.GPU != nil {
		cfg := gpu.Config{Width: spec.GPU.Width, Height: spec.GPU.Height}
		if spec.GPU.Virgl {
			r, err := startRenderer(*spec.GPU, mem)
			if err != nil {
				return devs, spec, err
			}
			cfg.Renderer = r
		}
		dev, err := gpu.New(cfg)
		if err != nil {
			if cfg.Renderer != nil {
				cfg.Renderer.Close()
			}
			return devs, spec, err
		}
		w, h := dev.Size()
		g := *spec.GPU
		g.Width, g.Height = w, h
		resolved.GPU = &g
		// A display comes with a keyboard and a tablet, the input a
		// viewer sends (virtio-input).
		devs = append(devs, dev, input.New(input.Keyboard), input.New(input.Tablet))
	}
	if spec.Balloon {
		dev, err := balloon.New(balloon.Config{Discarder: mem})
		if err != nil {
			return devs, spec, err
		}
		devs = append(devs, dev)
	}
	if len(devs) > MaxVirtioDevices {
		return devs, spec, fmt.Errorf("%d virtio devices: smol supports at most %d", len(devs), MaxVirtioDevices)
	}
	return devs, resolved, nil
}

func openNet(n Net, egressLog io.Writer) (virtio.Device, string, error) {
	if n.TAP == "" {
		return openGateway(n, egressLog)
	}
	if len(n.AllowHosts) > 0 || len(n.AllowCIDRs) > 0 || len(n.DNS) > 0 || len(n.Publish) > 0 || n.NoEgress {
		return nil, "", fmt.Errorf("an egress policy, DNS servers or published ports need smol's gateway, not TAP %s", n.TAP)
	}
	var mac net.HardwareAddr
	if n.MAC != "" {
		var err error
		if mac, err = tap.ParseMAC(n.MAC); err != nil {
			return nil, "", err
		}
	}
	t, err := tap.Create(n.TAP)
	if err != nil {
		return nil, "", err
	}
	if mac == nil {
		mac = tap.MACFromName(t.Name())
	}
	dev, err := vnet.New(t, vnet.Options{MAC: [6]byte(mac)})
	if err != nil {
		t.Close()
		return nil, "", err
	}
	return dev, mac.String(), nil
}

// openGateway starts the userspace gateway for n and a NIC on it. The
// policy's floor gets every address of this host: a guest must not reach
// services that listen only on it.
func openGateway(n Net, egressLog io.Writer) (virtio.Device, string, error) {
	mac, err := tap.ParseMAC(cmpOr(n.MAC, GatewayGuestMAC))
	if err != nil {
		return nil, "", err
	}
	rules, err := policy.ParseRules(n.AllowHosts, n.AllowCIDRs)
	if err != nil {
		return nil, "", err
	}
	rules.Floor = append(hostAddresses(), netip.PrefixFrom(gateway.GatewayIP, 32))
	rules.DenyAll = n.NoEgress
	var ports []gateway.Port
	for _, s := range n.Publish {
		p, err := gateway.ParsePort(s)
		if err != nil {
			return nil, "", err
		}
		ports = append(ports, p)
	}
	var resolvers []string
	for _, s := range n.DNS {
		r, err := resolverAddress(s)
		if err != nil {
			return nil, "", err
		}
		resolvers = append(resolvers, r)
	}
	gw, err := gateway.New(gateway.Config{GuestMAC: [6]byte(mac), Policy: policy.New(rules), Resolvers: resolvers, Log: egressLog})
	if err != nil {
		return nil, "", err
	}
	if err := gw.Publish(ports); err != nil {
		gw.Close()
		return nil, "", err
	}
	dev, err := vnet.New(gw, vnet.Options{MAC: [6]byte(mac), MTU: gateway.MTU})
	if err != nil {
		gw.Close()
		return nil, "", err
	}
	return dev, mac.String(), nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// resolverAddress checks a DNS server address, ADDR or ADDR:PORT.
func resolverAddress(s string) (string, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.String(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	return "", fmt.Errorf("DNS server %q: want an IP address, optionally with :PORT", s)
}

// hostAddresses lists this host's own addresses, as single-address
// prefixes.
func hostAddresses() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				ip = ip.Unmap()
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return out
}

// identityOf is what the guest sees that tells this device from another
// of its kind.
func identityOf(dev virtio.Device) string {
	switch d := dev.(type) {
	case *blk.Device:
		return d.Serial()
	case *vnet.Device:
		mac := d.MAC()
		return net.HardwareAddr(mac[:]).String()
	case *vsock.Device:
		return fmt.Sprintf("cid %d", d.CID())
	case *ninep.Device:
		return "tag " + d.Tag()
	case *gpu.Device:
		w, h := d.Size()
		return fmt.Sprintf("%dx%d", w, h)
	case *input.Device:
		if d.Kind() == input.Tablet {
			return "tablet"
		}
		return "keyboard"
	}
	return ""
}

// kindOf names a virtio device for DeviceInfo.
func kindOf(dev virtio.Device) string {
	switch dev.ID() {
	case virtio.IDBlock:
		return "blk"
	case virtio.IDNet:
		return "net"
	case virtio.IDVsock:
		return "vsock"
	case virtio.IDRNG:
		return "rng"
	case virtio.IDBalloon:
		return "balloon"
	case ninep.ID:
		return "9p"
	case virtio.IDGPU:
		return "gpu"
	case virtio.IDInput:
		return "input"
	}
	return fmt.Sprintf("virtio-%d", dev.ID())
}

// Devices returns the machine's device description with every identity
// filled in: given to New again, it gives the guest the same devices.
func (m *Machine) Devices() Devices { return m.spec }

// DeviceInfo lists every device the device manager built, legacy devices
// first, then virtio devices in guest order.
func (m *Machine) DeviceInfo() []DeviceInfo { return append([]DeviceInfo(nil), m.deviceInfo...) }

package smol

import (
	"fmt"
	"net"

	"github.com/smolvm/smol/netdev/tap"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/blk"
	vnet "github.com/smolvm/smol/virtio/net"
	"github.com/smolvm/smol/virtio/rng"
	"github.com/smolvm/smol/virtio/vsock"
	"github.com/smolvm/smol/vmm"
)

// Disk is a raw disk image given to the guest as a virtio block device.
// The first disk is /dev/vda, the second /dev/vdb, and so on.
type Disk struct {
	Path     string
	ReadOnly bool
	// Serial is what the guest reads as the disk's ID (at most 20 ASCII
	// characters); empty means one derived from the file.
	Serial string
}

// Vsock gives the guest a virtio-vsock device whose host side is Unix
// sockets: a guest connection to host port P reaches a listener at
// Path_P; a host program connects to Path and writes "CONNECT P\n" to reach
// guest port P.
type Vsock struct {
	Path string
	CID  uint64 // the guest's context ID; 0 means 3
}

// Net connects the guest's virtio-net device to a TAP interface on the host
// (created if it does not exist; creating one needs CAP_NET_ADMIN).
type Net struct {
	TAP string // interface name
	MAC string // the guest's MAC address; "" derives a stable one from TAP
}

// virtioDevices opens the devices a Config asks for, in guest order: disks
// first so that the first disk is /dev/vda. Every mistake (a missing disk, a
// disk in use by another VM, a bad socket path) is found here, before boot.
func virtioDevices(cfg Config) (devs []virtio.Device, err error) {
	defer func() {
		if err != nil {
			for _, d := range devs {
				if c, ok := d.(interface{ Close() error }); ok {
					c.Close()
				}
			}
			devs = nil
		}
	}()
	for _, d := range cfg.Disks {
		disk, err := blk.Open(d.Path, d.ReadOnly)
		if err != nil {
			return devs, err
		}
		dev, err := blk.New(disk, blk.Options{Serial: d.Serial})
		if err != nil {
			disk.Close()
			return devs, err
		}
		devs = append(devs, dev)
	}
	if cfg.Net != nil {
		dev, err := openNet(*cfg.Net)
		if err != nil {
			return devs, err
		}
		devs = append(devs, dev)
	}
	if cfg.Vsock != nil {
		dev, err := vsock.New(vsock.Config{CID: cfg.Vsock.CID, UDSPath: cfg.Vsock.Path})
		if err != nil {
			return devs, err
		}
		devs = append(devs, dev)
	}
	// Every guest gets the entropy device unless told otherwise: a kernel
	// without it can wait a long time for getrandom() to unblock.
	if !cfg.NoEntropy {
		devs = append(devs, rng.New())
	}
	if max := vmm.MaxVirtioDevices; len(devs) > max {
		return devs, fmt.Errorf("%d devices: smol supports at most %d virtio devices", len(devs), max)
	}
	return devs, nil
}

func openNet(n Net) (virtio.Device, error) {
	var mac net.HardwareAddr
	if n.MAC != "" {
		var err error
		if mac, err = tap.ParseMAC(n.MAC); err != nil {
			return nil, err
		}
	}
	t, err := tap.Create(n.TAP)
	if err != nil {
		return nil, err
	}
	if mac == nil {
		mac = tap.MACFromName(t.Name())
	}
	dev, err := vnet.New(t, vnet.Options{MAC: [6]byte(mac)})
	if err != nil {
		t.Close()
		return nil, err
	}
	return dev, nil
}

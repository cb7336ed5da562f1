package vmm

import (
	"errors"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/devices/gpu/virgl"
	"github.com/smolvm/smol/vmm/memory"
)

// startRenderer starts the 3D renderer helper for a display with Virgl,
// handing it the guest's RAM: the memfd and where guest addresses lie in
// it.
func startRenderer(g GPU, mem *memory.Guest) (gpu.Renderer, error) {
	helper := g.Helper
	if helper == "" {
		var err error
		if helper, err = virgl.FindHelper(); err != nil {
			return nil, err
		}
	}
	// The helper reads and writes resource backings in place, so it must
	// see what the guest sees: RAM still shared with its memfd (a
	// restored or forked machine's is private, and a display's machine
	// cannot be either).
	ram := mem.ContentFile()
	if ram == nil {
		return nil, errors.New("--gpu=virgl needs guest RAM the renderer can share; this machine's is private")
	}
	defer ram.Close()
	var regions []virgl.Region
	for _, r := range mem.Regions() {
		regions = append(regions, virgl.Region{GuestAddr: r.GuestAddr, Size: r.Size, FileOffset: r.HostOffset})
	}
	// The scanout buffer holds the largest display: a 3D resource on the
	// scanout is shown through it.
	r, err := virgl.Start(virgl.Config{Helper: helper, Memory: ram, Regions: regions,
		ScanoutBytes: gpu.MaxWidth * gpu.MaxHeight * 4})
	if err != nil {
		return nil, err
	}
	return r, nil
}

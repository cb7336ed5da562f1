package gpu

import "fmt"

// Limits bound what one guest can make the host hold. A guest asks for
// resources and backing lists as it likes; these caps turn a hostile or
// leaking guest's requests into ERR_OUT_OF_MEMORY answers instead of host
// memory.
type Limits struct {
	// MaxResources is how many resources may exist at once.
	MaxResources int
	// MaxHostBytes bounds the host's copies of all resources together
	// (width x height x 4 bytes each).
	MaxHostBytes uint64
	// MaxBackingEntries bounds one resource's scatter-gather list.
	MaxBackingEntries int
}

// DefaultLimits leave room for a desktop at the largest display size
// (double-buffered, plus cursors and a compositor's buffers) and no more:
// 1024 resources, 256 MiB of pixels, 16384 backing entries per resource
// (64 MiB of 4 KiB pages, a full 3840x2400 buffer with room to spare).
var DefaultLimits = Limits{MaxResources: 1024, MaxHostBytes: 256 << 20, MaxBackingEntries: 16384}

// Display sizes --gpu-size accepts. The upper bounds are what an EDID
// detailed timing can describe at 60 Hz; the lower ones what a desktop
// can use.
const (
	MinWidth, MaxWidth   = 320, 3840
	MinHeight, MaxHeight = 200, 2400
)

// DefaultWidth and DefaultHeight are the display's size unless told.
const DefaultWidth, DefaultHeight = 1280, 800

// CheckSize says whether width x height is a display size smol offers.
func CheckSize(width, height uint32) error {
	if width < MinWidth || width > MaxWidth || height < MinHeight || height > MaxHeight {
		return fmt.Errorf("display size %dx%d: want %d-%d x %d-%d", width, height, MinWidth, MaxWidth, MinHeight, MaxHeight)
	}
	return nil
}

package gpu

import (
	"errors"
	"image"
)

// scanout is what the one display shows: a rectangle of a resource.
type scanout struct {
	resourceID uint32 // 0: disabled
	rect       Rect
}

// Cursor is the pointer as the guest last set it.
type Cursor struct {
	// Visible is false until the guest sets a cursor image, and after it
	// hides the cursor (resource 0).
	Visible bool `json:"visible"`
	// X and Y are the pointer's position on the display; HotX and HotY
	// the hotspot within the image.
	X    uint32 `json:"x"`
	Y    uint32 `json:"y"`
	HotX uint32 `json:"hotX"`
	HotY uint32 `json:"hotY"`
	// Updates counts UPDATE_CURSOR and MOVE_CURSOR commands.
	Updates uint64 `json:"updates"`
}

// ErrNoScanout is Screenshot's error while the guest shows nothing: it
// has not set a mode yet, or turned the display off.
var ErrNoScanout = errors.New("the guest is not showing anything on the display (no mode set)")

// screenshot converts rectangle rect of resource r to RGBA. A display has
// no transparency: alpha is always opaque.
func screenshot(r *resource, rect Rect) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, int(rect.Width), int(rect.Height)))
	ch := formatChannels[r.format]
	stride := r.stride()
	for y := 0; y < int(rect.Height); y++ {
		src := r.pixels[(uint64(rect.Y)+uint64(y))*stride+uint64(rect.X)*bytesPerPixel:]
		dst := img.Pix[y*img.Stride:]
		for x := 0; x < int(rect.Width); x++ {
			p := src[x*bytesPerPixel : x*bytesPerPixel+bytesPerPixel : x*bytesPerPixel+bytesPerPixel]
			d := dst[x*4 : x*4+4 : x*4+4]
			d[0], d[1], d[2], d[3] = p[ch.r], p[ch.g], p[ch.b], 0xff
		}
	}
	return img
}

package gpu

import (
	"bytes"
	"image"
	"image/png"
	"math/rand/v2"
	"testing"
)

// EncodePNG's output decodes, with Go's own decoder, to the same pixels
// (opaque), for screens of several shapes and contents.
func TestEncodePNGRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []image.Point{{1, 1}, {3, 2}, {320, 200}, {1000, 700}} {
		img := image.NewRGBA(image.Rect(0, 0, size.X, size.Y))
		for i := range img.Pix {
			img.Pix[i] = byte(rng.Uint32())
			if i%4 == 3 {
				img.Pix[i] = 0xff
			}
		}
		var buf bytes.Buffer
		if err := EncodePNG(&buf, img); err != nil {
			t.Fatal(err)
		}
		got, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("%v: %v", size, err)
		}
		if got.Bounds() != img.Bounds() {
			t.Fatalf("%v: decoded %v", size, got.Bounds())
		}
		for y := 0; y < size.Y; y++ {
			for x := 0; x < size.X; x++ {
				r, g, b, a := got.At(x, y).RGBA()
				w := img.RGBAAt(x, y)
				if byte(r>>8) != w.R || byte(g>>8) != w.G || byte(b>>8) != w.B || a != 0xffff {
					t.Fatalf("%v: pixel %d,%d is %v, want %v", size, x, y, got.At(x, y), w)
				}
			}
		}
	}
}

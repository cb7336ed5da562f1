package machine

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smolvm/smol/devices/gpu"
)

// pictureDisplay is a Display whose picture and frame number the test
// sets: the control API's part (encoding, long polls, errors) is what is
// under test here; package devices/gpu and the box tests cover the device.
type pictureDisplay struct {
	mu    sync.Mutex
	img   *image.RGBA
	frame uint64
	wake  chan struct{}
	input []InputEvent
}

func (p *pictureDisplay) Screenshot() (*image.RGBA, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.img, nil
}

func (p *pictureDisplay) Frame() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frame
}

func (p *pictureDisplay) WaitFrame(ctx context.Context, after uint64) (uint64, error) {
	for {
		p.mu.Lock()
		f, wake := p.frame, p.wake
		p.mu.Unlock()
		if f > after {
			return f, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
}

func (p *pictureDisplay) Size() (uint32, uint32) {
	return uint32(p.img.Rect.Dx()), uint32(p.img.Rect.Dy())
}
func (p *pictureDisplay) Cursor() gpu.Cursor { return gpu.Cursor{Visible: true, X: 3, Y: 4} }
func (p *pictureDisplay) Input(ev []InputEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.input = append(p.input, ev...)
	return nil
}

func (p *pictureDisplay) draw(c color.RGBA) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(p.img.Pix); i += 4 {
		p.img.Pix[i], p.img.Pix[i+1], p.img.Pix[i+2], p.img.Pix[i+3] = c.R, c.G, c.B, c.A
	}
	p.frame++
	close(p.wake)
	p.wake = make(chan struct{})
}

func TestScreenEndpoint(t *testing.T) {
	ctx := context.Background()
	if _, _, err := serve(t, &fakeVMM{state: Running}).Screen(ctx, 0); err == nil || !strings.Contains(err.Error(), "--gpu") {
		t.Fatalf("screen of a machine without a display: %v", err)
	}

	d := &pictureDisplay{img: image.NewRGBA(image.Rect(0, 0, 40, 30)), wake: make(chan struct{})}
	d.draw(color.RGBA{10, 20, 30, 255})
	c := serve(t, &fakeVMM{state: Running, display: d})
	b, frame, err := c.Screen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 40 || img.Bounds().Dy() != 30 || frame != 1 {
		t.Fatalf("%v frame %d", img.Bounds(), frame)
	}
	if r, g, bl, _ := img.At(39, 29).RGBA(); r>>8 != 10 || g>>8 != 20 || bl>>8 != 30 {
		t.Fatalf("pixel %v", img.At(39, 29))
	}

	// A long poll returns when the next frame is drawn, with it.
	go func() {
		time.Sleep(100 * time.Millisecond)
		d.draw(color.RGBA{200, 0, 0, 255})
	}()
	start := time.Now()
	b, frame, err = c.Screen(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	img, _ = png.Decode(bytes.NewReader(b))
	if frame != 2 || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("frame %d after %v", frame, time.Since(start))
	}
	if r, _, _, _ := img.At(0, 0).RGBA(); r>>8 != 200 {
		t.Fatalf("long poll returned the old picture: %v", img.At(0, 0))
	}
	keys := []InputEvent{{Kind: "key", Code: "KeyA", Down: true}, {Kind: "move", X: 5, Y: 6}}
	if err := c.Input(ctx, keys); err != nil || len(d.input) != 2 || d.input[0] != keys[0] || d.input[1] != keys[1] {
		t.Fatalf("input: %v, display got %+v", err, d.input)
	}
	if err := c.Input(ctx, make([]InputEvent, MaxInputEvents+1)); err == nil {
		t.Fatal("an oversized input request was taken")
	}
	info, err := c.Display(ctx)
	if err != nil || info.Width != 40 || info.Height != 30 || info.Frame != 2 || !info.Cursor.Visible || info.Cursor.X != 3 {
		t.Fatalf("display info %+v, %v", info, err)
	}
}

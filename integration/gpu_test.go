package integration

import (
	"bytes"
	"context"
	stdimage "image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol"
)

// The display (--gpu, devices/gpu) with Linux's virtio-gpu driver in the
// box.

// TestDisplayScreenshotAndCursor: a machine with a display has
// /dev/dri/card0 and /dev/fb0 of the size asked for; a pattern the guest
// writes to /dev/fb0 comes back pixel-exact from `smol machine
// screenshot`; the cursor the guest sets through DRM moves on the host's
// side; a machine without a display and bad flags get one line each.
func TestDisplayScreenshotAndCursor(t *testing.T) {
	home := t.TempDir()
	displayMachine(t, home, "gpu")
	dir := t.TempDir()
	shot := filepath.Join(dir, "shot.png")

	// The cursor, set and moved through DRM by a guest program that holds
	// the device meanwhile.
	mustMachine(t, home, "cp", artifact(t, "build/nettool", "guest"), "gpu:/bin/nettool")
	mustMachine(t, home, "exec", "gpu", "--", "sh", "-c", "nettool cursor 10 20 300 200 120 > /tmp/cursor.log 2>&1 &")
	t.Setenv("SMOL_HOME", home)
	m, err := smol.OpenMachine("gpu")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := m.Display(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if c := info.Cursor; c.Visible && c.X == 300 && c.Y == 200 {
			if info.Width != displayW || info.Height != displayH {
				t.Errorf("display info %+v", info)
			}
			break
		}
		if time.Now().After(deadline) {
			_, log, _ := machineCLI(t, home, "exec", "gpu", "--", "cat", "/tmp/cursor.log")
			t.Fatalf("cursor %+v, want visible at 300,200; the guest program said: %s", info.Cursor, log)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Refusals, one line each.
	mustMachine(t, home, "create", "plain", "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", "plain") })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"screenshot", "plain", "-o", shot}, "no display"},
		{[]string{"fork", "gpu"}, "display"},
		{[]string{"create", "bad1", "--gpu=3d"}, "unknown mode"},
		{[]string{"create", "bad2", "--gpu", "--gpu-size", "10x10"}, "display size"},
		{[]string{"create", "bad3", "--gpu-size", "800x600"}, "needs --gpu"},
	} {
		code, _, stderr := machineCLI(t, home, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("smol machine %v: exit %d, stderr %q (want one line with %q)", c.args, code, stderr, c.want)
		}
	}
}

func decodePNG(t *testing.T, path string) *stdimage.RGBA {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	rgba, ok := img.(*stdimage.RGBA)
	if !ok {
		out := stdimage.NewRGBA(img.Bounds())
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				out.Set(x, y, img.At(x, y))
			}
		}
		rgba = out
	}
	return rgba
}

// differingPixels counts the pixels where got and want differ (all of
// them when the sizes do).
func differingPixels(got, want *stdimage.RGBA) int {
	if got.Bounds() != want.Bounds() {
		return want.Bounds().Dx() * want.Bounds().Dy()
	}
	n := 0
	for i := 0; i < len(want.Pix); i += 4 {
		if !bytes.Equal(got.Pix[i:i+4], want.Pix[i:i+4]) {
			n++
		}
	}
	return n
}

// The display's size in these tests.
const displayW, displayH = 640, 480

// displayMachine creates and starts a machine with a 640x480 display,
// checks the guest's display devices, has the guest write a pattern to
// /dev/fb0 and waits until `smol machine screenshot` returns it
// pixel-exact; it returns the pattern as the picture it must show as.
func displayMachine(t *testing.T, home, name string) *stdimage.RGBA {
	t.Helper()
	const w, h = displayW, displayH
	mustMachine(t, home, "create", name, "--gpu", "--gpu-size", "640x480", "--cpus", "1", "--mem", "256M", "--storage", "1G")
	t.Cleanup(func() { machineCLI(t, home, "rm", "-f", name) })
	startMachine(t, home, name)

	out := mustMachine(t, home, "exec", name, "--", "sh", "-c",
		"ls /dev/dri/card0 /dev/fb0 && cat /sys/class/graphics/fb0/virtual_size /sys/class/graphics/fb0/stride /sys/class/graphics/fb0/bits_per_pixel")
	if want := "/dev/dri/card0\n/dev/fb0\n640,480\n2560\n32\n"; out != want {
		t.Fatalf("the guest's display devices:\n%s\nwant:\n%s", out, want)
	}

	// The pattern in /dev/fb0's format (XRGB8888: bytes B, G, R, X) and
	// the picture it must show as.
	raw := make([]byte, w*h*4)
	want := stdimage.NewRGBA(stdimage.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r, g, b := byte(x), byte(y), byte(x^y)
			p := raw[(y*w+x)*4:]
			p[0], p[1], p[2], p[3] = b, g, r, 0
			i := want.PixOffset(x, y)
			want.Pix[i], want.Pix[i+1], want.Pix[i+2], want.Pix[i+3] = r, g, b, 0xff
		}
	}
	dir := t.TempDir()
	patternFile := filepath.Join(dir, "pattern")
	if err := os.WriteFile(patternFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	mustMachine(t, home, "cp", patternFile, name+":/tmp/pattern")
	mustMachine(t, home, "exec", name, "--", "sh", "-c", "cat /tmp/pattern > /dev/fb0")

	// The fbdev layer flushes damage after a short delay: poll.
	shot := filepath.Join(dir, "shot.png")
	deadline := time.Now().Add(60 * time.Second)
	for {
		mustMachine(t, home, "screenshot", name, "-o", shot)
		got := decodePNG(t, shot)
		diff := differingPixels(got, want)
		if diff == 0 {
			return want
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screenshot (%v) differs from the pattern in %d pixels", got.Bounds(), diff)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestDisplayLiveViewInABrowser: `smol machine view` opened in headless
// Chromium shows the guest's screen (a screenshot of the page holds the
// guest's picture), and keys typed in the page reach the guest's
// keyboard device (a guest program reading it sees their codes).
func TestDisplayLiveViewInABrowser(t *testing.T) {
	home := t.TempDir()
	want := displayMachine(t, home, "view")
	// The guest's key reader first: a browser in the box leaves little
	// CPU for anything else.
	mustMachine(t, home, "cp", artifact(t, "build/nettool", "guest"), "view:/bin/nettool")
	mustMachine(t, home, "exec", "view", "--", "sh", "-c", "nettool keys 'smol keyboard' 3 > /tmp/keys.log 2>&1 &")
	waitGuestFile(t, home, "view", "/tmp/keys.log", "nettool-keys reading")

	t.Cleanup(func() { // after the browser's cleanup, which runs first
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, err := exec.Command("pgrep", "-a", "chrom").Output()
			if err != nil || len(out) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("browser processes outlived the test:\n%s", out)
				return
			}
		}
	})
	view := exec.Command(artifact(t, "bin/smol", "build"), "machine", "view", "view")
	view.Env = append(os.Environ(), "SMOL_HOME="+home)
	url := firstLine(t, view)
	t.Cleanup(func() { view.Process.Kill(); view.Wait() })
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.Contains(url, "token=") {
		t.Fatalf("smol machine view printed %q", url)
	}
	// Without the token, nothing.
	noToken := url[:strings.Index(url, "?")]
	if resp, err := http.Get(noToken + "screen"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the screen without a token: %v %v", resp, err)
	}

	// Headless Chromium's window holds its (invisible) toolbars too: the
	// page's viewport is smaller than the window, so the window is made
	// well larger than the guest's screen.
	b := startBrowser(t, 1000, 1000)
	b.open(url)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		page, err := png.Decode(bytes.NewReader(b.screenshot()))
		if err != nil {
			t.Fatal(err)
		}
		same, total := matchingPixels(page, want)
		if same == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page (%v) shows %d of the guest's %d pixels", page.Bounds(), same, total)
		}
		time.Sleep(time.Second)
	}

	b.typeKeys("a", "b", "\uE006") // WebDriver's Return; \uE007 is the keypad's Enter
	log := waitGuestFile(t, home, "view", "/tmp/keys.log", "nettool-key 28")
	if !strings.Contains(log, "nettool-key 30\nnettool-key 48\nnettool-key 28\n") {
		t.Fatalf("the guest read:\n%s\nwant keys 30 (a), 48 (b), 28 (Enter)", log)
	}
}

// matchingPixels counts the pixels of want that page shows at the same
// place, exactly.
func matchingPixels(page stdimage.Image, want *stdimage.RGBA) (same, total int) {
	for y := 0; y < want.Rect.Dy(); y++ {
		for x := 0; x < want.Rect.Dx(); x++ {
			total++
			r, g, b, _ := page.At(x, y).RGBA()
			w := want.RGBAAt(x, y)
			if byte(r>>8) == w.R && byte(g>>8) == w.G && byte(b>>8) == w.B {
				same++
			}
		}
	}
	return same, total
}

// waitGuestFile polls a file in the machine until it contains s, and
// returns it.
func waitGuestFile(t *testing.T, home, name, path, s string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, out, _ := machineCLI(t, home, "exec", name, "--", "cat", path)
		if strings.Contains(out, s) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in machine %s never held %q; it holds:\n%s", path, name, s, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Command bench-virgl measures 3D through --gpu=virgl against the host's
// own OpenGL in the same session: gltri (internal/gltri) draws the same
// frames of flat-coloured triangles in a guest, where Mesa's virgl driver
// sends them to smol-gpu on the host, and directly on the host (llvmpipe
// where there is no GPU). Each side's figure is gltri's own time for its
// draw loop and read-back (the guest's boot and process start are not in
// it); the two pictures must hash the same, or the round fails.
//
// Run -prepare on the host first (it builds the Debian image with Mesa
// and gltri and prints their paths), then the bench where guests boot
// (the test box here): `make bench-gpu` does both.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/bench/internal/stats"
	"github.com/smolvm/smol/internal/debimage"
	"github.com/smolvm/smol/internal/gltri"
)

func main() {
	prepare := flag.Bool("prepare", false, "build the GL image and gltri on this host and print their paths (-image, -gltri)")
	image := flag.String("image", "", "the Debian image with Mesa and gltri (from -prepare)")
	gltriBin := flag.String("gltri", "", "gltri built for this host (from -prepare)")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	n := flag.Int("rounds", 3, "rounds; each runs the guest and the host once, in alternating order")
	frames := flag.Int("frames", 30, "frames per run")
	flag.Parse()
	if *prepare {
		cache, err := debimage.CacheDir()
		if err != nil {
			fatal(err)
		}
		bin, err := gltri.Build(cache)
		if err != nil {
			fatal(err)
		}
		img, err := debimage.Build(gltri.Image(bin), os.Stderr)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("-image %s -gltri %s\n", img, bin)
		return
	}
	if *image == "" || *gltriBin == "" || *n < 1 || *frames < 1 {
		fatal(fmt.Errorf("need -image and -gltri (run -prepare first), -rounds >= 1, -frames >= 1"))
	}
	args := []string{"bench", fmt.Sprint(*frames)}
	fmt.Printf("virgl bench: gltri, %d frames of 256 flat-coloured triangles at 256x256, %d rounds; guest: smol run --gpu=virgl, 2 vCPUs, 1 GiB; peer: the same program on the host\n",
		*frames, *n)

	run := func(who string, cmd *exec.Cmd) (gltri.Result, error) {
		var out bytes.Buffer
		if err := rounds.Command(who, cmd, 5*time.Minute, &out); err != nil {
			return nil, err
		}
		r := gltri.Parse(out.String())
		if _, err := r.Millis(); err != nil {
			return nil, fmt.Errorf("%s: %w: %s", who, err, out.String())
		}
		return r, nil
	}
	var guestMs, hostMs []float64
	renderer := ""
	res := rounds.Run(*n, max(3, *n/2), func(attempt int) error {
		order := []string{"guest", "host"}
		if attempt%2 == 0 {
			order = []string{"host", "guest"}
		}
		got := map[string]gltri.Result{}
		for _, who := range order {
			var cmd *exec.Cmd
			if who == "guest" {
				cmd = exec.Command(*smolBin, append([]string{"run", "--gpu=virgl", "--cpus", "2", "--mem", "1G", "--image", *image, "--", "gltri"}, args...)...)
			} else {
				cmd = exec.Command(*gltriBin, args...)
			}
			r, err := run(who, cmd)
			if err != nil {
				return err
			}
			got[who] = r
		}
		if got["guest"]["hash"] != got["host"]["hash"] {
			return fmt.Errorf("pictures differ: guest %s, host %s", got["guest"]["hash"], got["host"]["hash"])
		}
		g, _ := got["guest"].Millis()
		h, _ := got["host"].Millis()
		guestMs, hostMs = append(guestMs, g), append(hostMs, h)
		renderer = got["guest"]["renderer"]
		fmt.Printf("round %d: guest (%s) %.0f ms, host %.0f ms, ratio %.2f\n", attempt, renderer, g, h, h/g)
		return nil
	}, func(format string, a ...any) { fmt.Printf(format+"\n", a...) })
	if len(guestMs) == 0 {
		fatal(fmt.Errorf("no round finished: %s", res.Summary(*n)))
	}
	g, h := stats.Median(guestMs), stats.Median(hostMs)
	fmt.Printf("%d frames: guest through virgl %.0f ms (%.1f frames/s), host %.0f ms (%.1f frames/s); ratio (host time / guest time) %.2f (target >= 0.5)\n",
		*frames, g, float64(*frames)/g*1000, h, float64(*frames)/h*1000, h/g)
	fmt.Println(res.Summary(*n))
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench-virgl: %v\n", err)
	os.Exit(1)
}

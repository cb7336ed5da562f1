// Command bench-virgl measures 3D through --gpu=virgl against the host's
// own OpenGL in the same session: gltri (internal/gltri) draws the same
// frames in a guest, where Mesa's virgl driver sends them to smol-gpu on
// the host, and directly on the host (llvmpipe where there is no GPU), in
// two scenes: "draws" (256 small triangles a frame at 256x256: the API
// and command stream's cost) and "fill" (8 blended full-screen quads a
// frame at 1024x1024: the pixels' cost). Each side's figure is gltri's
// own time for its draw loop and read-back (the guest's boot and process
// start are not in it); the two pictures must hash the same, or the round
// fails.
//
// Run -prepare on the host first (it builds the Debian image with Mesa
// and gltri and prints their paths), then the bench where guests boot
// (the test box here): `make bench-gpu` does both.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
		progs, err := gltri.Build(cache)
		if err != nil {
			fatal(err)
		}
		img, err := debimage.Build(gltri.Image(progs), os.Stderr)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("-image %s -gltri %s\n", img, progs.Gltri)
		return
	}
	if *image == "" || *gltriBin == "" || *n < 1 || *frames < 1 {
		fatal(fmt.Errorf("need -image and -gltri (run -prepare first), -rounds >= 1, -frames >= 1"))
	}
	scenes := []struct {
		name string
		args []string
	}{
		{"draws", []string{"bench", fmt.Sprint(*frames)}},
		{"fill", []string{"fill", fmt.Sprint(max(1, *frames/2))}},
	}
	fmt.Printf("virgl bench: gltri, scene draws (%s frames of 256 flat-coloured triangles, 256x256) and fill (%s frames of 8 blended full-screen quads, 1024x1024), %d rounds; guest: smol run --gpu=virgl, 2 vCPUs, 1 GiB, both scenes in one boot; peer: the same program on the host\n",
		scenes[0].args[1], scenes[1].args[1], *n)

	// One guest boot runs every scene, its outputs separated by a line.
	const sep = "--- next scene ---"
	var script []string
	for _, sc := range scenes {
		script = append(script, "gltri "+strings.Join(sc.args, " "))
	}
	guestCmd := func() *exec.Cmd {
		return exec.Command(*smolBin, "run", "--gpu=virgl", "--cpus", "2", "--mem", "1G", "--image", *image, "--",
			"sh", "-c", strings.Join(script, " && echo '"+sep+"' && "))
	}
	output := func(who string, cmd *exec.Cmd) (string, error) {
		var out bytes.Buffer
		if err := rounds.Command(who, cmd, 10*time.Minute, &out); err != nil {
			return "", err
		}
		return out.String(), nil
	}
	guestMs, hostMs := map[string][]float64{}, map[string][]float64{}
	res := rounds.Run(*n, max(3, *n/2), func(attempt int) error {
		guestFirst := attempt%2 == 1
		var guestOut string
		hostOut := make([]string, len(scenes))
		runGuest := func() (err error) {
			guestOut, err = output("guest", guestCmd())
			return err
		}
		runHost := func() error {
			for i, sc := range scenes {
				out, err := output("host", exec.Command(*gltriBin, sc.args...))
				if err != nil {
					return err
				}
				hostOut[i] = out
			}
			return nil
		}
		first, second := runGuest, runHost
		if !guestFirst {
			first, second = runHost, runGuest
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		parts := strings.Split(guestOut, sep)
		if len(parts) != len(scenes) {
			return fmt.Errorf("guest printed %d scenes, want %d: %s", len(parts), len(scenes), guestOut)
		}
		type figures struct{ g, h float64 }
		got := map[string]figures{}
		for i, sc := range scenes {
			g, h := gltri.Parse(parts[i]), gltri.Parse(hostOut[i])
			if !strings.Contains(g["renderer"], "virgl") {
				return fmt.Errorf("guest renderer %q, want virgl", g["renderer"])
			}
			if g["hash"] != h["hash"] {
				return fmt.Errorf("%s: pictures differ: guest %s, host %s", sc.name, g["hash"], h["hash"])
			}
			gms, err1 := g.Millis()
			hms, err2 := h.Millis()
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			got[sc.name] = figures{gms, hms}
		}
		for _, sc := range scenes {
			f := got[sc.name]
			guestMs[sc.name] = append(guestMs[sc.name], f.g)
			hostMs[sc.name] = append(hostMs[sc.name], f.h)
			fmt.Printf("round %d %-5s: guest %.0f ms, host %.0f ms, ratio %.2f\n", attempt, sc.name, f.g, f.h, f.h/f.g)
		}
		return nil
	}, func(format string, a ...any) { fmt.Printf(format+"\n", a...) })
	if len(guestMs[scenes[0].name]) == 0 {
		fatal(fmt.Errorf("no round finished: %s", res.Summary(*n)))
	}
	for _, sc := range scenes {
		g, h := stats.Median(guestMs[sc.name]), stats.Median(hostMs[sc.name])
		fmt.Printf("%-5s (gltri %s): guest through virgl %.0f ms, host %.0f ms; ratio (host time / guest time) %.2f (target >= 0.5)\n",
			sc.name, strings.Join(sc.args, " "), g, h, h/g)
	}
	fmt.Println(res.Summary(*n))
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench-virgl: %v\n", err)
	os.Exit(1)
}

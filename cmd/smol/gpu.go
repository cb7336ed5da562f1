package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/devices/gpu/virgl"
	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/spf13/pflag"
)

// gpuFlags are --gpu and --gpu-size, shared by smol run and smol machine
// create.
type gpuFlags struct {
	fs   *pflag.FlagSet
	mode *string
	size *string
}

func addGPUFlags(fs *pflag.FlagSet) gpuFlags {
	g := gpuFlags{fs: fs}
	g.mode = fs.String("gpu", "", "give the guest a display (virtio-gpu: /dev/dri/card0, /dev/fb0): --gpu or --gpu=2d; --gpu=virgl adds 3D (OpenGL through virglrenderer in the sandboxed smol-gpu helper)")
	fs.Lookup("gpu").NoOptDefVal = "2d"
	g.size = fs.String("gpu-size", fmt.Sprintf("%dx%d", gpu.DefaultWidth, gpu.DefaultHeight), "the display's size, WIDTHxHEIGHT")
	return g
}

// config returns the display the flags ask for, nil for none.
func (g gpuFlags) config() (*smol.GPU, error) {
	switch *g.mode {
	case "":
		if g.fs.Changed("gpu-size") {
			return nil, usageError{"--gpu-size needs --gpu"}
		}
		return nil, nil
	case "2d", "virgl":
	default:
		return nil, usageError{fmt.Sprintf("--gpu=%s: unknown mode (want 2d or virgl)", *g.mode)}
	}
	w, h, err := parseDisplaySize(*g.size)
	if err != nil {
		return nil, usageError{"--gpu-size: " + err.Error()}
	}
	if *g.mode == "virgl" {
		// Found now, so a missing helper is one line before anything is
		// pulled or booted.
		if _, err := virgl.FindHelper(); err != nil {
			return nil, err
		}
		return &smol.GPU{Width: w, Height: h, Virgl: true}, nil
	}
	return &smol.GPU{Width: w, Height: h}, nil
}

// parseDisplaySize reads WIDTHxHEIGHT.
func parseDisplaySize(s string) (uint32, uint32, error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not WIDTHxHEIGHT (e.g. 1280x800)", s)
	}
	w, err1 := strconv.ParseUint(ws, 10, 32)
	h, err2 := strconv.ParseUint(hs, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not WIDTHxHEIGHT (e.g. 1280x800)", s)
	}
	if err := gpu.CheckSize(uint32(w), uint32(h)); err != nil {
		return 0, 0, err
	}
	return uint32(w), uint32(h), nil
}

// machineScreenshot is `smol machine screenshot NAME -o FILE`: the
// machine's screen as a PNG file, written whole or not at all.
func machineScreenshot(args []string) error {
	fs := newFlags("screenshot", "NAME -o FILE")
	out := fs.StringP("output", "o", "", "write the PNG to FILE (- for stdout)")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *out == "" {
		return usageError{"smol machine screenshot: -o FILE is required"}
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	png, err := m.Screenshot(context.Background())
	if err != nil {
		return err
	}
	if *out == "-" {
		_, err = os.Stdout.Write(png)
		return err
	}
	return atomicfile.Write(*out, png)
}

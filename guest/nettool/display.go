package main

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DRM ioctls (include/uapi/drm/drm.h, drm_mode.h): _IOWR('d', nr, size).
const (
	drmIoctlModeGetResources = 0xc04064a0 // struct drm_mode_card_res, 64 bytes
	drmIoctlModeCursor       = 0xc01c64a3 // struct drm_mode_cursor, 28 bytes
	drmIoctlModeCreateDumb   = 0xc02064b2 // struct drm_mode_create_dumb, 32 bytes

	drmModeCursorBO   = 0x01
	drmModeCursorMove = 0x02
)

type drmModeCardRes struct {
	FBIDPtr, CRTCIDPtr, ConnectorIDPtr, EncoderIDPtr     uint64
	CountFBs, CountCRTCs, CountConnectors, CountEncoders uint32
	MinWidth, MaxWidth, MinHeight, MaxHeight             uint32
}

type drmModeCursor struct {
	Flags, CRTCID uint32
	X, Y          int32
	Width, Height uint32
	Handle        uint32
}

type drmModeCreateDumb struct {
	Height, Width, BPP, Flags uint32
	Handle, Pitch             uint32
	Size                      uint64
}

func drmIoctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		switch errno {
		case 0:
			return nil
		case unix.EINTR, unix.EAGAIN:
			continue
		}
		return errno
	}
}

// cursor shows a 64x64 cursor on /dev/dri/card0's first CRTC at x0,y0
// (the legacy cursor ioctl with a dumb buffer), moves it to x1,y1, prints
// "nettool-cursor moved" and holds the device for hold: closing it hands
// the display back to the fbdev console, which hides the cursor.
func cursor(x0, y0, x1, y1 int32, hold time.Duration) error {
	fd, err := unix.Open("/dev/dri/card0", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var res drmModeCardRes
	if err := drmIoctl(fd, drmIoctlModeGetResources, unsafe.Pointer(&res)); err != nil {
		return fmt.Errorf("GETRESOURCES: %w", err)
	}
	if res.CountCRTCs == 0 {
		return fmt.Errorf("no CRTC")
	}
	crtcs := make([]uint32, res.CountCRTCs)
	res = drmModeCardRes{CRTCIDPtr: uint64(uintptr(unsafe.Pointer(&crtcs[0]))), CountCRTCs: uint32(len(crtcs))}
	if err := drmIoctl(fd, drmIoctlModeGetResources, unsafe.Pointer(&res)); err != nil {
		return fmt.Errorf("GETRESOURCES: %w", err)
	}
	bo := drmModeCreateDumb{Width: 64, Height: 64, BPP: 32}
	if err := drmIoctl(fd, drmIoctlModeCreateDumb, unsafe.Pointer(&bo)); err != nil {
		return fmt.Errorf("CREATE_DUMB: %w", err)
	}
	set := drmModeCursor{Flags: drmModeCursorBO, CRTCID: crtcs[0], Width: 64, Height: 64, Handle: bo.Handle}
	if err := drmIoctl(fd, drmIoctlModeCursor, unsafe.Pointer(&set)); err != nil {
		return fmt.Errorf("cursor image: %w", err)
	}
	for _, p := range [][2]int32{{x0, y0}, {x1, y1}} {
		move := drmModeCursor{Flags: drmModeCursorMove, CRTCID: crtcs[0], X: p[0], Y: p[1]}
		if err := drmIoctl(fd, drmIoctlModeCursor, unsafe.Pointer(&move)); err != nil {
			return fmt.Errorf("cursor move: %w", err)
		}
	}
	fmt.Println("nettool-cursor moved")
	os.Stdout.Sync()
	time.Sleep(hold)
	return nil
}

// More DRM ioctls for the display benchmark.
const (
	drmIoctlModeGetCRTC = 0xc06864a1 // struct drm_mode_crtc, 104 bytes
	drmIoctlModeDirtyFB = 0xc01864b1 // struct drm_mode_fb_dirty_cmd, 24 bytes
)

type drmModeCRTC struct {
	SetConnectorsPtr uint64
	CountConnectors  uint32
	CRTCID, FBID     uint32
	X, Y             uint32
	GammaSize        uint32
	ModeValid        uint32
	Mode             [68]byte // struct drm_mode_modeinfo
}

type drmModeFBDirty struct {
	FBID, Flags, Color, NumClips uint32
	ClipsPtr                     uint64
}

// fbRate marks the whole framebuffer on the first CRTC dirty (DIRTYFB with
// no clips: the entire screen) over and over for secs seconds and prints
// how many full-screen updates a second went through. Each one is a
// synchronous atomic commit, which the virtio-gpu driver turns into a
// TRANSFER_TO_HOST_2D of the whole screen and a RESOURCE_FLUSH, waiting
// for both: the rate is the display's full-screen update rate.
func fbRate(secs float64) error {
	fd, err := unix.Open("/dev/dri/card0", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var res drmModeCardRes
	if err := drmIoctl(fd, drmIoctlModeGetResources, unsafe.Pointer(&res)); err != nil || res.CountCRTCs == 0 {
		return fmt.Errorf("GETRESOURCES: %v (%d CRTCs)", err, res.CountCRTCs)
	}
	crtcs := make([]uint32, res.CountCRTCs)
	res = drmModeCardRes{CRTCIDPtr: uint64(uintptr(unsafe.Pointer(&crtcs[0]))), CountCRTCs: uint32(len(crtcs))}
	if err := drmIoctl(fd, drmIoctlModeGetResources, unsafe.Pointer(&res)); err != nil {
		return fmt.Errorf("GETRESOURCES: %w", err)
	}
	crtc := drmModeCRTC{CRTCID: crtcs[0]}
	if err := drmIoctl(fd, drmIoctlModeGetCRTC, unsafe.Pointer(&crtc)); err != nil {
		return fmt.Errorf("GETCRTC: %w", err)
	}
	if crtc.FBID == 0 {
		return fmt.Errorf("CRTC %d shows no framebuffer (no mode set)", crtc.CRTCID)
	}
	dirty := drmModeFBDirty{FBID: crtc.FBID}
	n := 0
	start := time.Now()
	for time.Since(start).Seconds() < secs {
		if err := drmIoctl(fd, drmIoctlModeDirtyFB, unsafe.Pointer(&dirty)); err != nil {
			return fmt.Errorf("DIRTYFB: %w", err)
		}
		n++
	}
	fmt.Printf("nettool-result fb-updates %.1f /s\n", float64(n)/time.Since(start).Seconds())
	return nil
}

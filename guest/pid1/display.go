package pid1

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux framebuffer ioctls and the one field of struct fb_var_screeninfo
// (160 bytes; include/uapi/linux/fb.h) that lightDisplay changes.
const (
	fbioGetVScreenInfo = 0x4600
	fbioPutVScreenInfo = 0x4601
	fbVarScreenInfoLen = 160
	fbActivateOffset   = 84   // __u32 activate
	fbActivateForce    = 0x80 // FB_ACTIVATE_FORCE: set the mode even if unchanged
)

// LightDisplay sets the display's mode through /dev/fb0 if the machine
// has one (smol run --gpu). The guest kernel has no framebuffer console,
// which is what would otherwise set it at boot, so without this the
// screen stays dark until a program takes the DRM device, and what a
// program writes to /dev/fb0 never shows. Putting the current settings
// back with FB_ACTIVATE_FORCE makes the fbdev layer do the mode set
// (drm_fb_helper_set_par): the display then shows /dev/fb0.
//
// Without a display it does nothing.
func LightDisplay() error {
	f, err := os.OpenFile("/dev/fb0", os.O_RDWR, 0)
	if err != nil {
		return nil // no display
	}
	defer f.Close()
	var info [fbVarScreenInfoLen]byte
	if err := fbIoctl(f, fbioGetVScreenInfo, &info); err != nil {
		return fmt.Errorf("display: %w", err)
	}
	*(*uint32)(unsafe.Pointer(&info[fbActivateOffset])) |= fbActivateForce
	if err := fbIoctl(f, fbioPutVScreenInfo, &info); err != nil {
		return fmt.Errorf("display: %w", err)
	}
	return nil
}

func fbIoctl(f *os.File, req uintptr, info *[fbVarScreenInfoLen]byte) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(unsafe.Pointer(&info[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

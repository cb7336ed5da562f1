package box

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The box kernel must know its TSC frequency, and must not measure it.
//
// Under QEMU's software CPU the box's TSC ticks with the host's TSC, but
// the box kernel calibrates it against QEMU's emulated PIT, and when the
// host is busy that calibration fails ("tsc: Unable to calibrate against
// PIT", "Marking TSC unstable"). The box then runs on jiffies with a TSC
// frequency of zero, and KVM inside it can never enter a guest:
// kvm_guest_time_update needs the TSC frequency, re-queues its own clock
// update request and returns, forever. Every nested guest hangs with zero
// exits. Telling the box kernel the host's TSC frequency (tsc_early_khz)
// and that the TSC is reliable (no watchdog that a starved box would trip)
// removes the race with the host's load.

// tscParams returns the box kernel's TSC parameters, or "" when the host's
// TSC frequency is unknown (the box then calibrates, as before).
func tscParams() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	khz, ok := hostTSCkHz(f)
	if !ok {
		return ""
	}
	return fmt.Sprintf("tsc_early_khz=%d tsc=reliable", khz)
}

// hostTSCkHz reads the TSC frequency from /proc/cpuinfo: "cpu MHz" is the
// TSC's frequency on a host whose TSC is constant (flag constant_tsc),
// which is the only case where a fixed number is right.
func hostTSCkHz(cpuinfo io.Reader) (khz int, ok bool) {
	var mhz float64
	var constant bool
	s := bufio.NewScanner(cpuinfo)
	for s.Scan() {
		key, value, found := strings.Cut(s.Text(), ":")
		if !found {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "cpu MHz":
			if mhz == 0 {
				mhz, _ = strconv.ParseFloat(value, 64)
			}
		case "flags":
			constant = constant || strings.Contains(" "+value+" ", " constant_tsc ")
		}
		if key == "" && mhz != 0 { // end of the first CPU's block
			break
		}
	}
	if !constant || mhz < 100 || mhz > 100000 {
		return 0, false
	}
	return int(mhz * 1000), true
}

package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// keys reads the input device called name (as /sys/class/input lists it,
// e.g. "smol keyboard") and prints "nettool-key CODE" for each of the
// first n key presses, in order.
func keys(name string, n int) error {
	dev, err := inputDevice(name)
	if err != nil {
		return err
	}
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Println("nettool-keys reading", dev)
	os.Stdout.Sync()
	var ev [24]byte // struct input_event on 64-bit Linux: timeval, type, code, value
	for n > 0 {
		if _, err := f.Read(ev[:]); err != nil {
			return err
		}
		typ, code, value := binary.LittleEndian.Uint16(ev[16:]), binary.LittleEndian.Uint16(ev[18:]), int32(binary.LittleEndian.Uint32(ev[20:]))
		if typ == 1 && value == 1 { // EV_KEY, pressed
			fmt.Println("nettool-key", code)
			os.Stdout.Sync()
			n--
		}
	}
	return nil
}

// inputDevice finds the /dev/input/eventN of the device called name.
func inputDevice(name string) (string, error) {
	paths, _ := filepath.Glob("/sys/class/input/event*/device/name")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/input/" + filepath.Base(filepath.Dir(filepath.Dir(p))), nil
		}
	}
	return "", fmt.Errorf("no input device called %q", name)
}

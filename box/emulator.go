package box

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// emulator is the QEMU that runs the box.
//
// By default it is the system's (Debian 12's QEMU 7.2). SMOLBOX_QEMU names
// another qemu-system-x86_64, such as the 10.x one scripts/box-qemu.sh
// unpacks from bookworm-backports into smol's cache, to see whether a
// failure follows the emulator: the box's emulation of SVM under QEMU's
// software CPU is behind most of the guest and box deaths the README's
// known issue lists. Only the box's emulator changes: the benchmarks'
// peer, QEMU microvm inside the box, stays the system's.
type emulator struct {
	binary string
	args   []string // before the box's own: where an unpacked QEMU's data is
	env    []string // added to QEMU's environment: where its modules are
}

// boxQEMUEnv names the variable that picks the box's emulator: the path of
// a qemu-system-x86_64.
const boxQEMUEnv = "SMOLBOX_QEMU"

// findEmulator returns the box's QEMU: $SMOLBOX_QEMU, else
// qemu-system-x86_64 on PATH.
func findEmulator() (emulator, error) {
	if choice := os.Getenv(boxQEMUEnv); choice != "" {
		if _, err := os.Stat(choice); err != nil {
			return emulator{}, fmt.Errorf("%w: %s=%s: %v", ErrUnavailable, boxQEMUEnv, choice, err)
		}
		return unpacked(choice), nil
	}
	bin, err := exec.LookPath(qemuBinary)
	if err != nil {
		return emulator{}, fmt.Errorf("%w: %s not found (apt-get install qemu-system-x86)", ErrUnavailable, qemuBinary)
	}
	return emulator{binary: bin}, nil
}

// unpacked describes a QEMU binary at ROOT/usr/bin, whose data and modules
// are under ROOT as the Debian packages lay them out, when they are there
// (a QEMU unpacked beside the system's must not read the system's
// modules, built for another version).
func unpacked(bin string) emulator {
	e := emulator{binary: bin}
	root := filepath.Dir(filepath.Dir(filepath.Dir(bin)))
	if data := filepath.Join(root, "usr", "share", "qemu"); isDir(data) {
		e.args = []string{"-L", data}
	}
	if mods := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu", "qemu"); isDir(mods) {
		e.env = []string{"QEMU_MODULE_DIR=" + mods}
	}
	return e
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// Emulator says which QEMU a box started now would run, and its version,
// for reports that record what ran the box.
func Emulator() string {
	e, err := findEmulator()
	if err != nil {
		return err.Error()
	}
	cmd := exec.Command(e.binary, append(e.args, "-version")...)
	cmd.Env = append(os.Environ(), e.env...)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("%s (-version: %v)", e.binary, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return fmt.Sprintf("%s (%s)", line, e.binary)
}

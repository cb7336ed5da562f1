package smol

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNoKernel reports that no kernel was given and none was found.
var ErrNoKernel = errors.New("no kernel: pass --kernel PATH, or build smol's guest kernel with 'make kernel' (writes build/vmlinux)")

// DefaultKernel finds the guest kernel that `make kernel` built: $SMOL_KERNEL,
// build/vmlinux beside the smol binary's bin/ directory, or build/vmlinux in
// the working directory.
func DefaultKernel() (string, error) {
	if k := os.Getenv("SMOL_KERNEL"); k != "" {
		return k, nil
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(filepath.Dir(exe)), "build", "vmlinux"))
	}
	candidates = append(candidates, filepath.Join("build", "vmlinux"))
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && info.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", ErrNoKernel
}

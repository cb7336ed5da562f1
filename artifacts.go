package smol

import (
	"errors"
	"os"
	"path/filepath"
)

// smol's guest artifacts, the kernel and the agent's initramfs, are build
// outputs (`make kernel`, `make guest`) found beside the smol binary: an
// installation is bin/smol plus build/.

// ErrNoKernel reports that no kernel was given and none was found.
var ErrNoKernel = errors.New("no kernel: pass --kernel PATH, or build smol's guest kernel with 'make kernel' (writes build/vmlinux)")

// ErrNoAgent reports that the guest agent's initramfs was not found.
var ErrNoAgent = errors.New("no guest agent: build it with 'make guest' (writes build/agent.cpio), or set SMOL_AGENT_INITRD")

// DefaultKernel finds the guest kernel that `make kernel` built: $SMOL_KERNEL,
// build/vmlinux beside the smol binary's bin/ directory, or build/vmlinux in
// the working directory.
func DefaultKernel() (string, error) { return findArtifact("SMOL_KERNEL", "vmlinux", ErrNoKernel) }

// DefaultAgentInitrd finds the initramfs holding the guest agent and the
// default busybox root filesystem that `make guest` built:
// $SMOL_AGENT_INITRD, or build/agent.cpio found as DefaultKernel finds the
// kernel.
func DefaultAgentInitrd() (string, error) {
	return findArtifact("SMOL_AGENT_INITRD", "agent.cpio", ErrNoAgent)
}

func findArtifact(envVar, name string, notFound error) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		return p, nil
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(filepath.Dir(exe)), "build", name))
	}
	candidates = append(candidates, filepath.Join("build", name))
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && info.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", notFound
}

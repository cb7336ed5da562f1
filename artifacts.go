package smol

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/smolvm/smol/internal/guestbin"
)

// smol's guest artifacts, the kernel and the agent's initramfs, are build
// outputs (`make kernel`, `make guest`) that `make build` embeds in the
// smol binary (package guestbin), so that the binary alone is an
// installation. A build without them (plain `go build`) finds them beside
// the binary instead: bin/smol plus build/.

// ErrNoKernel reports that no kernel was given and none was found.
var ErrNoKernel = errors.New("no kernel: pass --kernel PATH, or build smol's guest kernel with 'make kernel' (writes build/vmlinux)")

// ErrNoAgent reports that the guest agent's initramfs was not found.
var ErrNoAgent = errors.New("no guest agent: build it with 'make guest' (writes build/agent.cpio), or set SMOL_AGENT_INITRD")

// DefaultKernel finds the guest kernel: $SMOL_KERNEL, else the one embedded
// in this binary, else build/vmlinux beside the smol binary's bin/
// directory or in the working directory.
func DefaultKernel() (string, error) {
	return findArtifact("SMOL_KERNEL", "vmlinux", guestbin.Kernel, ErrNoKernel)
}

// DefaultAgentInitrd finds the initramfs holding the guest agent and the
// default busybox root filesystem: $SMOL_AGENT_INITRD, else the embedded
// one, else build/agent.cpio found as DefaultKernel finds the kernel.
func DefaultAgentInitrd() (string, error) {
	return findArtifact("SMOL_AGENT_INITRD", "agent.cpio", guestbin.Agent, ErrNoAgent)
}

func findArtifact(envVar, name string, embedded func() (string, error), notFound error) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		return p, nil
	}
	if p, err := embedded(); err == nil {
		return p, nil
	} else if !errors.Is(err, guestbin.ErrNotEmbedded) {
		return "", err
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

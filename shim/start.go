package shim

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/containerd/log"
	"github.com/containerd/containerd/namespaces"
	cshim "github.com/containerd/containerd/runtime/v2/shim"
	taskapi "github.com/containerd/containerd/runtime/v2/task"
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/internal/mountinfo"
	"github.com/smolvm/smol/vmm"
)

// StartShim is containerd's `start`: it runs in the container's bundle and
// starts the shim daemon (this binary again, serving the task API on a
// socket it inherits), or, for a container of a group whose daemon runs
// already (a pod's), returns that daemon's address.
func (s *service) StartShim(ctx context.Context, opts cshim.StartOpts) (_ string, err error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return "", err
	}
	spec, specErr := readSpec(".")
	group := groupOf(opts.ID, spec)
	address, err := cshim.SocketAddress(ctx, opts.Address, group)
	if err != nil {
		return "", err
	}
	socket, err := cshim.NewSocket(address)
	if err != nil {
		if !cshim.SocketEaddrinuse(err) {
			return "", fmt.Errorf("shim socket: %w", err)
		}
		if cshim.CanConnect(address) { // the group's daemon
			return address, cshim.WriteAddress("address", address)
		}
		if err := cshim.RemoveSocket(address); err != nil {
			return "", err
		}
		if socket, err = cshim.NewSocket(address); err != nil {
			return "", err
		}
	}
	defer func() {
		if err != nil {
			socket.Close()
			cshim.RemoveSocket(address)
		}
	}()
	if err := cshim.WriteAddress("address", address); err != nil {
		return "", err
	}
	f, err := socket.File()
	if err != nil {
		return "", err
	}
	defer f.Close()
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cwd, _ := os.Getwd()
	cmd := exec.Command(self, "-namespace", ns, "-id", opts.ID, "-address", opts.Address)
	cmd.Dir = cwd
	cmd.ExtraFiles = []*os.File{f} // fd 3: the socket shim.Run serves
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The group's machine boots while the server starts and containerd
	// calls its Create, which then only waits for the boot. Nothing may
	// be printed here: containerd takes all this process prints for the
	// shim's address. A machine that cannot start now is started by
	// Create, which reports why not.
	if specErr == nil && spec.Process != nil {
		vmm.TraceTo(io.Discard)
		if h, err := launchForServer(ctx, ns, group, spec, cmd); err == nil {
			defer h.Close() // the server holds its own copies
		}
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go cmd.Wait()
	return address, nil
}

// Cleanup is containerd's `delete` for a shim that is gone: it removes
// what the container left (its root mount, the group's machine when no
// daemon holds it), so that a containerd or shim killed mid-create
// leaks no VM.
func (s *service) Cleanup(ctx context.Context) (*taskapi.DeleteResponse, error) {
	ns, _ := namespaces.Namespace(ctx)
	base := stateRoot()
	useMachineHome()
	spec, _ := readSpec(".")
	group := groupOf(s.id, spec)
	root := filepath.Join(base, ns, group, "roots", s.id)
	(&container{rootfs: root, mounted: true}).unmount()
	if group == s.id {
		if m, err := smol.OpenMachine(machineName(ns, group)); err == nil {
			m.Remove(ctx, true)
		}
		if err := mountinfo.DetachAllUnder(filepath.Join(base, ns, group)); err != nil {
			logf("cleanup of %s: %v", group, err)
		} else {
			os.RemoveAll(filepath.Join(base, ns, group))
		}
	}
	return &taskapi.DeleteResponse{ExitedAt: time.Now(), ExitStatus: 128 + uint32(syscall.SIGKILL)}, nil
}

// logf writes to the shim's log, which containerd copies into its own.
func logf(format string, args ...any) {
	log.L.Errorf("smol: "+format, args...)
}

package smol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/smolvm/smol/internal/units"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/pack"
	"github.com/smolvm/smol/vmm"
)

// Machines made from packs (.smolmachine files, package pack). What every
// machine of one pack shares, its guest kernel, agent and read-only root,
// is extracted once into SMOL_HOME/packs/ID; what is a machine's own, the
// writable layer and a live state, goes into the machine's directory. A
// pack is hostile input: every section is checked against its digest as
// it is extracted, and nothing is recorded until all of them were.

// The shared files of a pack, in SMOL_HOME/packs/ID.
const (
	packKernelFile = "vmlinux"
	packAgentFile  = "agent.cpio"
	packRootFile   = "root.ext4"
)

// liveStateFile is a machine's packed live state (a snapshot without
// disks) until its first start resumes it.
const liveStateFile = "live.smolsnap"

// OpenPack opens a .smolmachine file, or the pack of a stub (the
// runnable half of `smol pack create`): its own with --single-file, else
// its sidecar, which must be the one it was made with.
func OpenPack(path string) (*pack.Reader, error) {
	s, err := pack.ReadStub(path)
	switch {
	case errors.Is(err, pack.ErrNoStub):
		return pack.Open(path)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pack.OpenStub(path, s)
}

// packDir is where a pack's shared files are kept.
func packDir(id string) string { return filepath.Join(MachineHome(), "packs", id[:32]) }

// unpack extracts the pack's sections, checking each: the shared ones
// into packDir (unless an earlier machine of the same pack put them
// there) and those of own (Storage, Live, when the pack has them) into a
// new directory returned for the caller to take them from and remove.
// On failure nothing is left.
func unpack(r *pack.Reader, own []string, progress io.Writer) (shared, private string, err error) {
	shared = packDir(r.ID)
	if err := os.MkdirAll(filepath.Dir(shared), 0o700); err != nil {
		return "", "", err
	}
	dir, err := os.MkdirTemp(filepath.Dir(shared), ".unpack-")
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	private = dir
	extract := func(section, dst string) error {
		if s, ok := r.Manifest.Section(section); ok && progress != nil {
			fmt.Fprintf(progress, "unpacking %s (%s)\n", section, units.FormatSize(s.Size))
		}
		return atomicfile.CreateWith(dst, func(f *os.File) error { return r.Extract(section, f) })
	}
	for _, name := range own {
		if _, ok := r.Manifest.Section(name); ok {
			if err := extract(name, filepath.Join(private, name)); err != nil {
				return "", "", err
			}
		}
	}
	if _, err := os.Stat(filepath.Join(shared, packRootFile)); err == nil {
		return shared, private, nil
	}
	tmp := filepath.Join(private, "shared")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return "", "", err
	}
	for _, s := range []struct{ section, file string }{{pack.Kernel, packKernelFile}, {pack.Agent, packAgentFile}, {pack.Root, packRootFile}} {
		if err := extract(s.section, filepath.Join(tmp, s.file)); err != nil {
			return "", "", err
		}
	}
	// Another command may have unpacked the same pack meanwhile: its
	// files are as good as these.
	if err := os.Rename(tmp, shared); err != nil {
		if _, serr := os.Stat(filepath.Join(shared, packRootFile)); serr != nil {
			return "", "", err
		}
	}
	return shared, private, nil
}

// createFromPack is CreateMachine of c.From: the machine the pack holds,
// with c's shape and exec defaults over the pack's where c gives them.
func createFromPack(st *machine.Store, c MachineConfig) (_ *NamedMachine, err error) {
	if c.Image != "" {
		return nil, errors.New("a machine comes from an image or from a pack, not both")
	}
	r, err := OpenPack(c.From)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	pm := r.Manifest.Machine
	_, live := r.Manifest.Section(pack.Live)
	storage, hasStorage := r.Manifest.Section(pack.Storage)
	if live && ((c.CPUs != 0 && c.CPUs != pm.CPUs) || (c.Memory != 0 && c.Memory != pm.Memory) || c.IRQChip != "" || c.Net != nil || len(c.Disks) > 0 || len(c.Volumes) > 0) {
		return nil, fmt.Errorf("%s holds a live machine of %d vCPUs and %s: its shape, irqchip, network, disks and volumes cannot change", c.From, pm.CPUs, units.FormatSize(int64(pm.Memory)))
	}
	if c.IRQChip == "" {
		c.IRQChip = pm.IRQChip // checked by newSpec: a pack's word is no better than a user's
	}
	if hasStorage && c.Storage != 0 && c.Storage != storage.Size {
		return nil, fmt.Errorf("%s holds a writable layer of %s: --storage cannot change it", c.From, units.FormatSize(storage.Size))
	}
	spec, err := newSpec(c)
	if err != nil {
		return nil, err
	}
	if c.CPUs == 0 {
		spec.CPUs = pm.CPUs
	}
	if c.Memory == 0 {
		spec.Memory = pm.Memory
	}
	if c.Storage == 0 && pm.Storage != 0 {
		spec.Storage = pm.Storage
	}
	if hasStorage {
		spec.Storage = storage.Size
	}
	if c.Net == nil && pm.Net != nil {
		spec.Net = &machine.Net{AllowHosts: pm.Net.AllowHosts, AllowCIDRs: pm.Net.AllowCIDRs, DNS: pm.Net.DNS}
	}
	if c.GPU == nil && pm.GPU != nil {
		spec.GPU = &machine.GPU{Width: pm.GPU.Width, Height: pm.GPU.Height, Virgl: pm.GPU.Virgl}
	}
	if live {
		spec.Generation = 1 // a copy of the packed machine, as a restore is
	}
	shared, private, err := unpack(r, []string{pack.Storage, pack.Live}, c.Progress)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.From, err)
	}
	defer os.RemoveAll(private)
	ref := pm.Image
	if ref == "" {
		ref = "pack"
	}
	spec.Image = &machine.Image{Ref: ref, Digest: first(pm.Digest, "pack:"+r.ID), Disk: filepath.Join(shared, packRootFile),
		Config: imagefs.Config{Entrypoint: pm.Entrypoint, Cmd: pm.Cmd, Env: pm.Env, WorkingDir: pm.Workdir, User: pm.User}}
	spec.Kernel, spec.Agent, spec.Pack = filepath.Join(shared, packKernelFile), filepath.Join(shared, packAgentFile), r.ID
	if err := st.Create(spec); err != nil {
		return nil, err
	}
	m := &NamedMachine{store: st, spec: spec}
	defer func() {
		if err != nil {
			st.Remove(spec.Name)
		}
	}()
	for section, file := range map[string]string{pack.Storage: machine.StorageFile, pack.Live: liveStateFile} {
		if err := os.Rename(filepath.Join(private, section), st.Path(spec.Name, file)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return m, nil
}

// HostCPUError is a live state (or snapshot) this host's CPU cannot
// resume: another vendor, or CPU features it lacks.
type HostCPUError = vmm.HostCPUError

// LiveState tells whether the machine's next start resumes the live state
// it was packed with (pack create --live), and, when this host's CPU
// cannot resume it, why (a *vmm.HostCPUError: the start then boots the
// machine's disks cold instead).
func (m *NamedMachine) LiveState() (pending bool, err error) {
	path := m.store.Path(m.spec.Name, liveStateFile)
	if _, err := os.Stat(path); err != nil {
		return false, nil
	}
	return true, vmm.CheckRestoreHost(path)
}

// startSource is where the machine's next start takes its guest from: its
// packed live state while it has one, else a cold boot.
func (m *NamedMachine) startSource() VMMSource {
	path := m.store.Path(m.spec.Name, liveStateFile)
	if _, err := os.Stat(path); err != nil {
		return VMMSource{}
	}
	return VMMSource{Snapshot: path}
}

// start boots the machine or restores it from src. A machine's own
// packed live state is used once: removed when resumed (the guest's RAM
// maps it, which keeps its data), and dropped for a cold boot, said in
// the console log, where this host's CPU cannot resume it.
func (b *machineBackend) start(cfg Config, src VMMSource, boot net.Listener) error {
	if src.Snapshot == "" {
		return b.boot(cfg, boot)
	}
	err := b.restore(cfg, src)
	ownLive := src.Snapshot == b.store.Path(b.spec.Name, liveStateFile)
	var hostCPU *vmm.HostCPUError
	switch {
	case err == nil && ownLive:
		os.Remove(src.Snapshot)
	case ownLive && errors.As(err, &hostCPU):
		fmt.Fprintf(cfg.Console, "smol: cannot resume the packed live state on this host (%v): booting the machine's disks cold\n", err)
		os.Remove(src.Snapshot)
		return b.boot(cfg, boot)
	}
	return err
}

// RunPacked runs cmd, as RunCommand does, in a throwaway machine of the
// pack at path (a .smolmachine file or its stub): a cold boot of the
// packed kernel, root and a copy of the packed writable layer, all of it
// discarded when the command ends. cfg's zero fields take the pack's
// values (its Kernel and Initrd are always the pack's).
func RunPacked(ctx context.Context, path string, cfg Config, cmd Command) (int, error) {
	r, err := OpenPack(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	shared, private, err := unpack(r, []string{pack.Storage}, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer os.RemoveAll(private)
	pm := r.Manifest.Machine
	cfg.Kernel, cfg.Initrd = filepath.Join(shared, packKernelFile), filepath.Join(shared, packAgentFile)
	if cfg.CPUs == 0 {
		cfg.CPUs = pm.CPUs
	}
	if cfg.Memory == 0 {
		cfg.Memory = pm.Memory
	}
	if cfg.IRQChip == "" {
		cfg.IRQChip = pm.IRQChip // checked when the VM is built
	}
	if cfg.Net == nil && pm.Net != nil {
		cfg.Net = &Net{AllowHosts: pm.Net.AllowHosts, AllowCIDRs: pm.Net.AllowCIDRs, DNS: pm.Net.DNS}
	}
	if cfg.GPU == nil && pm.GPU != nil {
		cfg.GPU = &GPU{Width: pm.GPU.Width, Height: pm.GPU.Height, Virgl: pm.GPU.Virgl}
	}
	if _, ok := r.Manifest.Section(pack.Storage); ok {
		// The packed writable layer, copied: the guest's changes go with it.
		cfg.Disks = append([]Disk{{Path: filepath.Join(private, pack.Storage), Serial: "smol-storage"}}, cfg.Disks...)
		cfg.Cmdline += " smol.upper=/dev/vdb"
	}
	img := &imagefs.Image{Ref: first(pm.Image, "pack"), Digest: first(pm.Digest, "pack:"+r.ID), Disk: filepath.Join(shared, packRootFile),
		Config: imagefs.Config{Entrypoint: pm.Entrypoint, Cmd: pm.Cmd, Env: pm.Env, WorkingDir: pm.Workdir, User: pm.User}}
	return RunCommand(ctx, cfg, img, cmd)
}

package smol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/smolvm/smol/internal/units"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/pack"
	"github.com/smolvm/smol/virtio/blk"
)

// PackConfig describes a pack to make (smol pack create): an image or a
// machine, packed with this smol's guest kernel and agent (a machine made
// from a pack keeps its own) into one portable file.
type PackConfig struct {
	// Image packs a new machine of this image (pulled per Pull), or
	// FromMachine an existing, stopped machine with its writable layer
	// as it is now; exactly one of them.
	Image       string
	Pull        imagefs.PullPolicy
	Insecure    bool
	FromMachine string
	// Live also packs FromMachine's running processes (it must be
	// running): a machine made from the pack resumes them where its host's
	// CPU allows. The machine is paused while its state and disk are
	// copied, then runs on.
	Live bool

	// Output is the stub's path; the pack is Output + ".smolmachine"
	// beside it, or, with SingleFile, inside the stub. Existing files are
	// refused unless Force.
	Output     string
	SingleFile bool
	Force      bool
	// Runner is the smol binary the stub is a copy of; "" means
	// VMMExecutable, else this program.
	Runner string

	// The machine's shape and exec defaults, over the image's or the
	// machine's where given.
	CPUs       int
	Memory     uint64
	Storage    int64
	Env        []string
	Workdir    string
	User       string
	Entrypoint []string // nil keeps the image's
	Cmd        []string // nil keeps the image's
	Net        *Net     // the packed network policy; nil keeps the machine's (none for an image)

	Progress io.Writer // nil is quiet
}

// PackSuffix names a stub's sidecar: PATH and PATH.smolmachine.
const PackSuffix = ".smolmachine"

// Pack writes the pack c describes and returns its manifest. Everything
// is written under temporary names and put in place at the end, so a
// failure (a full disk) leaves no partial artifact. Packing the same
// input twice gives byte-identical files: the manifest's created time is
// $SOURCE_DATE_EPOCH, else the image's, else the machine's writable
// layer's last change.
func Pack(ctx context.Context, c PackConfig) (*pack.Manifest, error) {
	if (c.Image == "") == (c.FromMachine == "") {
		return nil, errors.New("pack an image (--image REF) or a machine (--from-machine NAME)")
	}
	if c.Live && c.FromMachine == "" {
		return nil, errors.New("--live packs a running machine: give --from-machine NAME")
	}
	if c.Output == "" {
		return nil, errors.New("no output path (-o PATH)")
	}
	stub, err := filepath.Abs(c.Output)
	if err != nil {
		return nil, err
	}
	sidecar := stub + PackSuffix
	outputs := []string{stub}
	if !c.SingleFile {
		outputs = append(outputs, sidecar)
	}
	for _, p := range outputs {
		if _, err := os.Lstat(p); err == nil && !c.Force {
			return nil, fmt.Errorf("%s already exists (--force replaces it)", p)
		}
	}
	runner, err := packRunner(c.Runner)
	if err != nil {
		return nil, err
	}
	src, err := packSource(ctx, c)
	if err != nil {
		return nil, err
	}
	defer src.cleanup()

	tmp, err := os.MkdirTemp(filepath.Dir(stub), "."+filepath.Base(stub)+".pack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	tmpPack := filepath.Join(tmp, filepath.Base(sidecar))
	w, err := pack.Create(tmpPack, src.manifest)
	if err != nil {
		return nil, err
	}
	defer w.Abort()
	for _, s := range src.sections {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := addFile(w, s.name, s.path, c.Progress); err != nil {
			return nil, err
		}
	}
	if err := w.Commit(); err != nil {
		return nil, err
	}
	r, err := pack.Open(tmpPack)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	tmpStub := filepath.Join(tmp, filepath.Base(stub))
	if err := pack.WriteStub(tmpStub, runner, tmpPack, c.SingleFile); err != nil {
		return nil, err
	}
	// The sidecar first: a stub is never in place without its pack.
	if !c.SingleFile {
		if err := place(tmpPack, sidecar, c.Force); err != nil {
			return nil, err
		}
	}
	if err := place(tmpStub, stub, c.Force); err != nil {
		return nil, err
	}
	return &r.Manifest, nil
}

// place puts the finished file tmp at path: replacing what is there with
// force, else only where nothing is.
func place(tmp, path string, force bool) error {
	if force {
		return os.Rename(tmp, path)
	}
	if err := atomicfile.Publish(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists (--force replaces it)", path)
		}
		return err
	}
	return nil
}

// packRunner is the smol binary a stub copies.
func packRunner(runner string) (string, error) {
	if runner == "" {
		runner = VMMExecutable
	}
	if runner == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		runner = exe
	}
	return runner, nil
}

// addFile adds the file at path as a section: a disk (the root, the
// writable layer) as the guest sees it, a layer read through its bases.
func addFile(w *pack.Writer, section, path string, progress io.Writer) error {
	var src io.ReaderAt
	var size int64
	if section == pack.Root || section == pack.Storage {
		d, err := blk.OpenView(path)
		if err != nil {
			return fmt.Errorf("%s: %w", section, err)
		}
		defer d.Close()
		v := d.View()
		src, size = v, v.Size()
	} else {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("%s: %w", section, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		src, size = f, fi.Size()
	}
	if progress != nil {
		fmt.Fprintf(progress, "packing %s (%s)\n", section, units.FormatSize(size))
	}
	return w.Add(section, src, size)
}

// packInput is what a pack is made of.
type packInput struct {
	manifest pack.Manifest
	sections []struct{ name, path string }
	cleanup  func()
}

func (p *packInput) add(name, path string) {
	p.sections = append(p.sections, struct{ name, path string }{name, path})
}

// packSource gathers the manifest and the files of the pack c describes.
func packSource(ctx context.Context, c PackConfig) (*packInput, error) {
	in := &packInput{cleanup: func() {}}
	m := &in.manifest
	m.Smol, m.Platform = Version(), runtime.GOOS+"/"+runtime.GOARCH
	var kernel, agent string
	var cfg imagefs.Config
	var err error
	if c.Image != "" {
		img, err := packImage(ctx, c)
		if err != nil {
			return nil, err
		}
		cfg = img.Config
		m.Machine = pack.Machine{CPUs: DefaultCPUs, Memory: DefaultMemory, Storage: DefaultStorage, Image: c.Image, Digest: img.Digest}
		m.Created = img.Config.Created
		in.add(pack.Root, img.Disk)
	} else {
		nm, err := OpenMachine(c.FromMachine)
		if err != nil {
			return nil, err
		}
		if c.Live && (c.CPUs != 0 || c.Memory != 0 || c.Storage != 0 || c.Net != nil) {
			return nil, errors.New("--live packs the machine as it runs: its shape and network cannot change")
		}
		if err := nm.packInto(ctx, in, c.Live); err != nil {
			in.cleanup()
			return nil, err
		}
		sp := nm.spec
		cfg, kernel, agent = sp.Image.Config, sp.Kernel, sp.Agent
		cfg.Env = append(append([]string(nil), cfg.Env...), sp.Env...)
		cfg.WorkingDir, cfg.User = first(sp.Workdir, cfg.WorkingDir), first(sp.User, cfg.User)
		m.Machine = pack.Machine{CPUs: sp.CPUs, Memory: sp.Memory, Storage: sp.Storage, IRQChip: sp.IRQChip, Image: sp.Image.Ref, Digest: sp.Image.Digest}
		if n := sp.Net; n != nil {
			m.Machine.Net = &pack.Net{AllowHosts: n.AllowHosts, AllowCIDRs: n.AllowCIDRs, DNS: n.DNS}
		}
		if g := sp.GPU; g != nil {
			m.Machine.GPU = &pack.GPU{Width: g.Width, Height: g.Height, Virgl: g.Virgl}
		}
	}
	if kernel == "" {
		if kernel, err = DefaultKernel(); err != nil {
			in.cleanup()
			return nil, err
		}
	}
	if agent == "" {
		if agent, err = DefaultAgentInitrd(); err != nil {
			in.cleanup()
			return nil, err
		}
	}
	in.sections = append([]struct{ name, path string }{{pack.Kernel, kernel}, {pack.Agent, agent}}, in.sections...)

	pm := &m.Machine
	pm.Env = append(append([]string(nil), cfg.Env...), c.Env...)
	pm.Workdir, pm.User = first(c.Workdir, cfg.WorkingDir), first(c.User, cfg.User)
	pm.Entrypoint, pm.Cmd = cfg.Entrypoint, cfg.Cmd
	if c.Entrypoint != nil {
		pm.Entrypoint, pm.Cmd = c.Entrypoint, nil // as docker run --entrypoint drops CMD
	}
	if c.Cmd != nil {
		pm.Cmd = c.Cmd
	}
	if c.CPUs != 0 {
		pm.CPUs = c.CPUs
	}
	if c.Memory != 0 {
		pm.Memory = c.Memory
	}
	if c.Storage != 0 {
		pm.Storage = c.Storage
	}
	if n := c.Net; n != nil {
		if n.TAP != "" || n.MAC != "" || len(n.Publish) > 0 {
			in.cleanup()
			return nil, errors.New("a pack's network is smol's gateway with an egress policy: no TAP, MAC or published ports")
		}
		pm.Net = &pack.Net{AllowHosts: n.AllowHosts, AllowCIDRs: n.AllowCIDRs, DNS: n.DNS}
	}
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			in.cleanup()
			return nil, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", epoch)
		}
		m.Created = time.Unix(sec, 0).UTC()
	}
	return in, nil
}

// packImage finds (or pulls) the image to pack.
func packImage(ctx context.Context, c PackConfig) (*imagefs.Image, error) {
	images, err := imagefs.Open(MachineHome())
	if err != nil {
		return nil, err
	}
	if c.Image == BuiltinRoot {
		return builtinRootImage(ctx, images, c.Progress)
	}
	return images.Get(ctx, c.Image, imagefs.Options{Pull: c.Pull, Insecure: c.Insecure, Progress: c.Progress})
}

// packInto adds the machine's root and writable layer to in, and with
// live its running state: the machine is paused while the state is
// written and the writable layer cloned, then runs on. A machine packed
// cold must not be running (its disk would change under the pack).
func (m *NamedMachine) packInto(ctx context.Context, in *packInput, live bool) error {
	name := m.spec.Name
	if m.spec.InMemory {
		return fmt.Errorf("machine %s runs in memory (--in-memory): a pack carries a machine's root and writable layer, which it has not", name)
	}
	// No start while the disk is read: it would change under the pack.
	sl, err := m.lockStart()
	if err != nil {
		return err
	}
	in.cleanup = func() { sl.Unlock() }
	st, err := m.store.Status(name)
	if err != nil {
		return err
	}
	running := st.State == machine.Running || st.State == machine.Paused
	if running && !live {
		return fmt.Errorf("machine %s is %s: stop it first, or pack its running processes too with --live", name, st.State)
	}
	if !running && live {
		return fmt.Errorf("machine %s is %s: --live packs a running machine", name, st.State)
	}
	if len(m.spec.Volumes) > 0 {
		return fmt.Errorf("machine %s has host directories (-v): a pack cannot carry them", name)
	}
	if len(m.spec.Disks) > 0 {
		return fmt.Errorf("machine %s has %d extra disks (--disk): a pack carries a machine's root and writable layer only", name, len(m.spec.Disks))
	}
	if _, err := os.Stat(m.spec.Image.Disk); err != nil {
		return fmt.Errorf("machine %s: its root %s: %w", name, m.spec.Image.Disk, err)
	}
	in.add(pack.Root, m.spec.Image.Disk)
	storage := m.store.StoragePath(name)
	if !live {
		in.manifest.Created = modTime(storage, m.spec.Created)
		if _, err := os.Stat(storage); err == nil { // a machine never started has none yet
			in.add(pack.Storage, storage)
		}
		return nil
	}
	sl.Unlock() // a running machine's own VMM holds it still
	in.cleanup = func() {}
	tmp, err := os.MkdirTemp(m.store.Dir(name), ".pack-")
	if err != nil {
		return err
	}
	in.cleanup = func() { os.RemoveAll(tmp) }
	wasPaused := st.State == machine.Paused
	if !wasPaused {
		if err := m.Pause(ctx); err != nil {
			return err
		}
	}
	state := filepath.Join(tmp, "live")
	err = m.client().Snapshot(ctx, machine.SnapshotRequest{Path: state, WithoutDisks: true})
	if err == nil {
		err = copyDisk(storage, filepath.Join(tmp, "storage"))
	}
	if !wasPaused {
		if rerr := m.Resume(ctx); err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("machine %s: %w", name, err)
	}
	in.manifest.Created = time.Now().UTC().Truncate(time.Second)
	in.add(pack.Storage, filepath.Join(tmp, "storage"))
	in.add(pack.Live, state)
	return nil
}

// modTime is the file's last change, or def when it has none.
func modTime(path string, def time.Time) time.Time {
	if fi, err := os.Stat(path); err == nil {
		return fi.ModTime().UTC().Truncate(time.Second)
	}
	return def.UTC().Truncate(time.Second)
}

// Version is this smol's version: its module version, or the commit it
// was built from.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel+" + rev
}

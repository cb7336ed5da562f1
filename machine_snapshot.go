package smol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/snapshot"
	"github.com/smolvm/smol/vmm"
)

// Snapshots, restores and forks of named machines, as clients of their
// VMM processes (the VMM's side is machine_fork.go).

// Snapshot writes the running (or paused) machine to a new file at path:
// its record, CPU and device state, RAM and disks, all in one file that
// Restore turns into a machine again, here or on another host with the
// same CPU vendor. The machine is paused while the file is written. With
// leaveRunning it then runs on; otherwise it is shut down cleanly, like
// Stop. An existing path is never replaced, and a failed snapshot (a
// full disk) leaves no file.
func (m *NamedMachine) Snapshot(ctx context.Context, path string, leaveRunning bool) error {
	name := m.spec.Name
	if err := m.mustRun("snapshot"); err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); err == nil {
		return fmt.Errorf("%s already exists", path)
	}
	if err := m.client().Snapshot(ctx, machine.SnapshotRequest{Path: abs}); err != nil {
		return fmt.Errorf("machine %s: snapshot: %w", name, err)
	}
	if leaveRunning {
		return nil
	}
	return m.Stop(ctx, machine.DefaultStopTimeout)
}

// mustRun refuses an operation on a machine that is not running or
// paused.
func (m *NamedMachine) mustRun(what string) error {
	if len(m.spec.Volumes) > 0 {
		return fmt.Errorf("machine %s has host directories (-v): it cannot %s (the files its guest has open in them are its VMM's)", m.spec.Name, what)
	}
	if m.spec.GPU != nil {
		return fmt.Errorf("machine %s has a display (--gpu): it cannot %s (the display's state is not saved yet)", m.spec.Name, what)
	}
	if m.spec.InMemory {
		return fmt.Errorf("machine %s runs in memory (--in-memory): it cannot %s (a snapshot's machine needs its root and writable layer)", m.spec.Name, what)
	}
	st, err := m.store.Status(m.spec.Name)
	if err != nil {
		return err
	}
	if st.State != machine.Running && st.State != machine.Paused {
		return fmt.Errorf("machine %s is %s; only a running machine can %s", m.spec.Name, st.State, what)
	}
	return nil
}

// ForkOptions shapes a fork.
type ForkOptions struct {
	// Count is the number of children, 1 to MaxForkChildren.
	Count int
	// NamePrefix names the children PREFIX-1 ... PREFIX-N; every name
	// must be free. "" means NAME-fork, numbered after the children of
	// earlier forks.
	NamePrefix string
	// Template leaves the parent paused afterwards, as the frozen base of
	// its children; otherwise it runs on beside them.
	Template bool
}

// MaxForkChildren bounds one fork's children.
const MaxForkChildren = machine.MaxForkChildren

// Fork branches the running machine into opts.Count children, each a new
// machine with its own VMM process that continues from this instant: the
// same processes, files and memory, copy-on-write (no RAM is copied; each
// writable disk is cloned), with its own identity: fresh kernel entropy,
// the host's clock, its name as host name, a new /etc/machine-id and a
// generation counter in /run/smol/generation. Secrets in the parent's
// memory at the fork are in every child too. It returns once every child
// runs; on failure none is left and the parent is as it was.
func (m *NamedMachine) Fork(ctx context.Context, opts ForkOptions) ([]*NamedMachine, error) {
	if opts.Count < 1 || opts.Count > MaxForkChildren {
		return nil, fmt.Errorf("a fork makes 1 to %d children, not %d", MaxForkChildren, opts.Count)
	}
	if err := m.mustRun("fork"); err != nil {
		return nil, err
	}
	names, err := m.childNames(opts)
	if err != nil {
		return nil, err
	}
	vmm.TracePhase("fork: asking %s's VMM", m.spec.Name)
	if err := m.client().Fork(ctx, machine.ForkRequest{Names: names, Template: opts.Template}); err != nil {
		return nil, fmt.Errorf("machine %s: fork: %w", m.spec.Name, err)
	}
	vmm.TracePhase("fork: done")
	children := make([]*NamedMachine, len(names))
	for i, n := range names {
		if children[i], err = OpenMachine(n); err != nil {
			return nil, err
		}
	}
	return children, nil
}

// childNames picks the names of a fork's children.
func (m *NamedMachine) childNames(opts ForkOptions) ([]string, error) {
	existing, err := m.store.Names()
	if err != nil {
		return nil, err
	}
	taken := map[string]bool{}
	for _, n := range existing {
		taken[n] = true
	}
	prefix, first := opts.NamePrefix, 1
	if prefix == "" {
		prefix = m.spec.Name + "-fork"
		for _, n := range existing { // after earlier forks' children
			if k, err := strconv.Atoi(strings.TrimPrefix(n, prefix+"-")); err == nil && strings.HasPrefix(n, prefix+"-") && k >= first {
				first = k + 1
			}
		}
	}
	names := make([]string, opts.Count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, first+i)
		if err := machine.ValidateName(names[i]); err != nil {
			return nil, fmt.Errorf("--name-prefix %q: %w", prefix, err)
		}
		if taken[names[i]] {
			return nil, fmt.Errorf("machine %s already exists: choose another name prefix", names[i])
		}
	}
	return names, nil
}

// Restore makes a new machine called name from the snapshot file at path
// (NamedMachine.Snapshot) and starts it: its processes continue where the
// snapshot was taken, with a new identity (as a fork's child gets). Its
// disks are copied out of the file into the machine's directory; its RAM
// is read from the file as the guest touches it, so the file must stay
// where it is while the machine runs (a cold start later boots from the
// machine's own disks). A damaged file, one of another format version,
// or one from a host with another CPU vendor is refused with one line,
// and leaves nothing behind.
func Restore(ctx context.Context, path, name string) (_ *NamedMachine, err error) {
	if err := machine.ValidateName(name); err != nil {
		return nil, err
	}
	st, err := machineStore()
	if err != nil {
		return nil, err
	}
	if _, err := st.Load(name); err == nil {
		return nil, fmt.Errorf("machine %s: %w", name, machine.ErrExists)
	} else if !errors.Is(err, machine.ErrNotFound) {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	r, err := snapshot.Open(abs)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var raw json.RawMessage
	if err := r.Section(specSection, specSectionVersion, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w (not a snapshot of a smol machine?)", path, err)
	}
	spec, err := machine.DecodeSpec(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if spec.Image == nil {
		return nil, fmt.Errorf("%s: the machine record has no image", path)
	}
	// Every path in the record is the old host's: the new machine's disks
	// are its own, copied out of the file.
	files := []string{rootDiskFile, machine.StorageFile}
	for i := range spec.Disks {
		files = append(files, extraDiskFile(i))
	}
	for i := range files {
		if _, _, ok := r.Region(fmt.Sprintf("disk.%d", i)); !ok {
			return nil, fmt.Errorf("%s: the snapshot holds %d of the machine's disks, not %d", path, i, len(files))
		}
	}
	spec.Name, spec.Created, spec.Generation, spec.Parent = name, time.Now().UTC(), spec.Generation+1, ""
	spec.Hostname = ""                              // a new identity: the restored machine's own name
	spec.Kernel, spec.Agent, spec.Pack = "", "", "" // a later cold boot uses this smol's
	spec.Image.Disk = st.Path(name, rootDiskFile)
	for i := range spec.Disks {
		spec.Disks[i].Path = st.Path(name, extraDiskFile(i))
	}
	if err := st.Create(spec); err != nil {
		return nil, err
	}
	m := &NamedMachine{store: st, spec: spec}
	defer func() {
		if err != nil {
			m.Remove(context.Background(), true)
		}
	}()
	for i, file := range files {
		if err := extractRegion(r, fmt.Sprintf("disk.%d", i), st.Path(name, file)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := m.startVMM(ctx, VMMSource{Snapshot: abs}); err != nil {
		return nil, err
	}
	return m, nil
}

// rootDiskFile is a restored machine's own copy of its image's disk.
const rootDiskFile = "root.ext4"

// extractRegion writes a disk region of the snapshot to a new file.
func extractRegion(r *snapshot.Reader, region, dst string) error {
	err := atomicfile.CreateWith(dst, func(f *os.File) error { return r.CopyRegion(region, f) })
	if err != nil {
		return fmt.Errorf("%s: %w", region, err)
	}
	return nil
}

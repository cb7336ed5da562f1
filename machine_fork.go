package smol

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/smolvm/smol/internal/sparsefile"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/virtio/blk"
	"github.com/smolvm/smol/vmm"
)

// The VMM process's side of snapshots, restores and forks. A snapshot is
// one file (package snapshot's format) holding the machine's record, its
// VM state, its RAM and its disks, so that it restores on a host that has
// none of the machine's files. A fork hands each child a state file
// without RAM and the parent's sealed RAM memfd, inherited as an open
// file: the child maps it privately, so no memory is copied, and its
// disks are copy-on-write clones of the parent's, made while the parent
// is paused.

// The machine record's section in a snapshot.
const (
	specSection        = "smol.machine"
	specSectionVersion = 1
)

// forkChildFD is the descriptor of the parent's RAM in a fork child's
// VMM process (the first of exec.Cmd.ExtraFiles), forkChildOverlayFD its
// overlay's when it has one (vmm.ForkRAM).
const (
	forkChildFD        = 3
	forkChildOverlayFD = 4
)

// identityTimeout bounds the wait for a restored guest's agent to answer.
const identityTimeout = 30 * time.Second

// restore builds the VM from src, runs it, and gives the guest its new
// identity before anyone can reach it: a restored or forked guest that
// could not take a new identity is stopped, never handed out.
func (b *machineBackend) restore(cfg Config, src VMMSource) error {
	vcfg := cfg.vmmConfig()
	var vm *vmm.Machine
	var err error
	if src.RAM.Base != nil {
		vm, err = vmm.RestoreFork(src.Snapshot, src.RAM, vcfg)
		src.RAM.Close() // mapped now; the mapping keeps the memfds
	} else {
		vm, err = vmm.Restore(src.Snapshot, vcfg)
	}
	if err != nil {
		return err
	}
	vmm.TracePhase("restore: VM built")
	if b.m, err = run(vm); err != nil {
		return err
	}
	vmm.TracePhase("restore: vCPUs started")
	if err := b.identify(); err != nil {
		b.m.Stop()
		return fmt.Errorf("giving the restored guest its identity: %w", err)
	}
	return nil
}

// identify tells the guest agent who this machine is now: fresh entropy,
// the host's clock (sent with the identity, then refined by the agent's
// own round trips: agent.Identity.SyncClock), its name, a new machine-id
// and its generation. The
// agent's listener survived the restore; its connections did not (the
// vsock device posted a transport reset), so the first dials may fail
// while the guest's driver catches up.
func (b *machineBackend) identify() error {
	id, err := newIdentity(b.spec.Generation)
	if err != nil {
		return err
	}
	start := agent.Start{Idle: true, Hostname: b.spec.GuestHostname(), Identity: id}
	err = sendIdentity(b.DialAgent, b.m.Done(), start, identityTimeouts{
		total: identityTimeout, answer: identityAnswerTimeout, redial: identityRedial,
	})
	vmm.TracePhase("restore: identity given (%v)", err)
	if errors.Is(err, errVMEnded) {
		// Say how: a restored guest that faulted leaves no console line.
		if exit, crash := b.m.Wait(); crash != nil {
			err = fmt.Errorf("%w: %v", err, crash)
		} else {
			err = fmt.Errorf("%w (%s)", err, exit.Reason)
		}
	}
	return err
}

// errVMEnded is sendIdentity's answer when the VM stopped before its
// agent took the identity.
var errVMEnded = errors.New("the VM ended")

// identityTimeouts are sendIdentity's limits (variables for its tests).
type identityTimeouts struct {
	total  time.Duration // for the whole hand-over
	answer time.Duration // for one session on a connection the guest took
	redial time.Duration // between tries
}

// sendIdentity runs the identity session start with the agent reached by
// dial, trying again on a new connection until it answers or the time is
// up; vmDone ends it early.
//
// A guest that took the connection answers in well under a second,
// unless its late transport reset dropped the socket under the agent: the
// vsock device holds host connections until the guest has handled the
// reset, but for at most 10 s, and a reset handled after that closes the
// guest's sockets without a word to the host. So a session that ends
// without an answer is tried again; the same identity applied twice is
// harmless.
func sendIdentity(dial func(context.Context) (net.Conn, error), vmDone <-chan struct{}, start agent.Start, limits identityTimeouts) error {
	deadline := time.Now().Add(limits.total)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := dial(ctx)
		cancel()
		vmm.TracePhase("restore: agent dialled (%v)", err)
		if err == nil {
			answerBy := time.Now().Add(limits.answer)
			if answerBy.After(deadline) {
				answerBy = deadline
			}
			conn.SetDeadline(answerBy)
			start.Identity.Time = time.Now().UnixNano()
			exit, runErr := agent.Run(conn, start, agent.Streams{})
			conn.Close()
			if runErr == nil {
				if exit.Error != "" {
					return errors.New(exit.Error)
				}
				return nil
			}
			err = runErr
		}
		select {
		case <-vmDone:
			return errVMEnded
		case <-time.After(limits.redial):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent did not answer within %v: %w", limits.total, err)
		}
	}
}

// identityAnswerTimeout bounds one identity session on a connection the
// guest accepted.
const identityAnswerTimeout = 10 * time.Second

// identityRedial is the pause between dials of a restored guest's agent
// (a dial before the guest's vsock driver has handled its transport reset
// is refused at once). 10 ms was tried for one box run, in which eight
// children at once crashed the box's kernel in four boxes; whether the
// quicker redial had a part in it is not known, so it stays at 50 ms.
const identityRedial = 50 * time.Millisecond

func newIdentity(generation uint64) (*agent.Identity, error) {
	seed := make([]byte, 64)
	id := make([]byte, 16)
	mid := make([]byte, 16)
	for _, b := range [][]byte{seed, id, mid} {
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
	}
	return &agent.Identity{Generation: generation, Seed: seed, ID: hex.EncodeToString(id), MachineID: hex.EncodeToString(mid), SyncClock: true}, nil
}

// holdPaused pauses the machine for a snapshot or fork and returns what
// puts it back: a machine that ran runs again, one the user had paused
// stays paused.
func (b *machineBackend) holdPaused() (release func(), err error) {
	if b.m.vm.Paused() {
		return func() {}, nil
	}
	if err := b.Pause(); err != nil {
		return nil, err
	}
	return func() { b.Resume() }, nil
}

// Snapshot writes the machine, paused for the time it takes, to a new
// file at req.Path: its record, its VM state and RAM, and (unless
// req.WithoutDisks) its disks.
func (b *machineBackend) Snapshot(req machine.SnapshotRequest) error {
	b.statesMu.Lock()
	defer b.statesMu.Unlock()
	defer func() { go vmm.ReleaseIdleMemory() }()
	release, err := b.holdPaused()
	if err != nil {
		return err
	}
	defer release()
	return b.m.vm.Snapshot(req.Path, vmm.SnapshotOptions{
		Sections: []vmm.Section{{Name: specSection, Version: specSectionVersion, Value: b.spec}},
		Disks:    !req.WithoutDisks,
	})
}

// Fork starts a child machine of each name from this instant. While the
// parent is paused: its state goes to a hand-over file, its RAM is frozen
// (memfd sealed), and each child's record and disks are made (clones of
// the parent's writable disks). Then the parent runs on (unless
// req.Template) while the children's VMM processes start, each mapping
// the frozen RAM privately. A failure removes the children made so far
// and leaves the parent as it was.
func (b *machineBackend) Fork(req machine.ForkRequest) (err error) {
	b.statesMu.Lock()
	defer b.statesMu.Unlock()
	defer func() { go vmm.ReleaseIdleMemory() }() // after the reply, off the fork's path
	for _, name := range req.Names {
		if _, err := b.store.Load(name); err == nil {
			return fmt.Errorf("machine %s already exists", name)
		} else if !errors.Is(err, machine.ErrNotFound) {
			return err
		}
	}
	vmm.TracePhase("fork: request for %d children", len(req.Names))
	release, err := b.holdPaused()
	if err != nil {
		return err
	}
	vmm.TracePhase("fork: parent paused")
	released := false
	defer func() {
		if !released && (err != nil || !req.Template) {
			release()
		}
	}()
	dir, err := os.MkdirTemp(b.store.Dir(b.spec.Name), ".fork-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "state")
	ram, err := b.m.vm.ForkState(state, nil)
	if err != nil {
		return err
	}
	defer ram.Close()
	vmm.TracePhase("fork: state written, RAM sealed")

	var children []*NamedMachine
	defer func() {
		if err != nil {
			for _, c := range children {
				c.Remove(context.Background(), true)
			}
		}
	}()
	for _, name := range req.Names {
		c, err := b.createChild(name)
		if err != nil {
			return err
		}
		children = append(children, c)
	}
	vmm.TracePhase("fork: children recorded")
	if err := b.forkStorage(children); err != nil {
		return err
	}
	vmm.TracePhase("fork: storage forked")
	if !req.Template {
		release() // the parent runs on while its children start
		released = true
		vmm.TracePhase("fork: parent resumed")
	}
	return startChildren(children, VMMSource{Snapshot: state, RAM: ram})
}

// startChildren starts the children's VMM processes one after another
// and stops at the first failure. (Started at once, the nine guests of an
// 8-child fork stalled or triple-faulted more often in the test box.)
func startChildren(children []*NamedMachine, src VMMSource) error {
	for _, c := range children {
		if err := c.startVMM(context.Background(), src); err != nil {
			return fmt.Errorf("child %s: %w", c.Name(), err)
		}
		vmm.TracePhase("fork: child %s runs", c.Name())
	}
	return nil
}

// createChild records a child of the paused machine: the parent's record
// under a new name, one generation on, with its own copy-on-write clones
// of the parent's writable disks; the image and read-only disks are
// shared.
func (b *machineBackend) createChild(name string) (*NamedMachine, error) {
	spec := *b.spec
	spec.Name, spec.Created, spec.Generation, spec.Parent = name, time.Now().UTC(), b.spec.Generation+1, b.spec.Name
	spec.Hostname = "" // a new identity: the child's own name
	spec.Disks = append([]machine.Disk(nil), b.spec.Disks...)
	for i := range spec.Disks {
		if !spec.Disks[i].ReadOnly {
			spec.Disks[i].Path = b.store.Path(name, extraDiskFile(i))
		}
	}
	if err := b.store.Create(&spec); err != nil {
		return nil, err
	}
	child := &NamedMachine{store: b.store, spec: &spec}
	if err := b.cloneDisks(child); err != nil {
		b.store.Remove(name)
		return nil, err
	}
	return child, nil
}

// storageDisk is the writable layer's place among the VM's disks (after
// the image's root).
const storageDisk = 1

// forkStorage gives every child its own copy-on-write writable layer,
// while the parent is paused: a clone of the parent's (FICLONE) where the
// filesystem has them; else the parent's layer is frozen into a base that
// the parent and each child then write over in layers of their own (no
// data copied), the bases hard-linked into every machine directory that
// needs them, so each lives as long as a layer above it. Past
// blk.MaxChain layers (a parent forked that many times) a child gets a
// copy of the data instead.
func (b *machineBackend) forkStorage(children []*NamedMachine) error {
	if err := b.m.vm.FlushDisks(); err != nil {
		return err
	}
	parent := b.store.StoragePath(b.spec.Name)
	if !strings.HasSuffix(parent, blk.OverlaySuffix) {
		err := sparsefile.Reflink(parent, b.store.Path(children[0].Name(), machine.StorageFile))
		if err == nil {
			for _, c := range children[1:] {
				if err := sparsefile.Reflink(parent, b.store.Path(c.Name(), machine.StorageFile)); err != nil {
					return fmt.Errorf("storage of %s: %w", c.Name(), err)
				}
			}
			return nil
		}
		if !errors.Is(err, sparsefile.ErrNoReflink) {
			return fmt.Errorf("storage of %s: %w", children[0].Name(), err)
		}
	}
	if b.m.vm.DiskDepth(storageDisk) >= blk.MaxChain {
		for _, c := range children {
			if err := copyDisk(parent, b.store.Path(c.Name(), machine.StorageFile)); err != nil {
				return fmt.Errorf("storage of %s: %w", c.Name(), err)
			}
		}
		return nil
	}
	stem := make([]byte, 8)
	rand.Read(stem)
	layer, base, err := b.m.vm.FreezeDisk(storageDisk, "storage.base-"+hex.EncodeToString(stem))
	if err != nil {
		return fmt.Errorf("freezing the writable layer: %w", err)
	}
	chain, err := blk.Chain(layer)
	if err != nil {
		return err
	}
	size := int64(b.m.vm.DiskSectors(storageDisk)) * blk.SectorSize
	for _, c := range children {
		for _, f := range chain {
			if err := os.Link(b.store.Path(b.spec.Name, f), b.store.Path(c.Name(), f)); err != nil {
				return fmt.Errorf("storage of %s: %w", c.Name(), err)
			}
		}
		if err := blk.CreateOverlay(b.store.Path(c.Name(), machine.StorageLayer), base, size); err != nil {
			return fmt.Errorf("storage of %s: %w", c.Name(), err)
		}
	}
	return nil
}

// copyDisk writes the disk at src (a raw image or a layer, read through
// its bases) to the new raw image dst: a clone where the filesystem can,
// else its data.
func copyDisk(src, dst string) error {
	if !strings.HasSuffix(src, blk.OverlaySuffix) {
		_, err := sparsefile.Clone(src, dst)
		return err
	}
	d, err := blk.OpenView(src)
	if err != nil {
		return err
	}
	defer d.Close()
	v := d.View()
	return atomicfile.CreateWith(dst, func(f *os.File) error {
		if err := sparsefile.Copy(f, v, 0, 0, v.Size()); err != nil {
			return err
		}
		return f.Truncate(v.Size())
	})
}

// cloneDisks gives child copy-on-write clones of the parent's writable
// extra disks, where its record says they are (the writable layer is
// forkStorage's).
func (b *machineBackend) cloneDisks(child *NamedMachine) error {
	name := child.spec.Name
	for i, d := range b.spec.Disks {
		if d.ReadOnly {
			continue
		}
		if _, err := sparsefile.Clone(d.Path, child.spec.Disks[i].Path); err != nil {
			return fmt.Errorf("disk %s of %s: %w", d.Path, name, err)
		}
	}
	return nil
}

// extraDiskFile is where a forked or restored machine keeps its own copy
// of extra disk i.
func extraDiskFile(i int) string { return fmt.Sprintf("disk-%d.img", i) }

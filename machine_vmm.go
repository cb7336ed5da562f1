package smol

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/imagefs/ext4fs"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/vmm"
)

// vmmCommand is the hidden `smol machine` subcommand that is a machine's
// VMM process: `smol machine __vmm NAME`.
const vmmCommand = "__vmm"

// VMMCommand is the argument that makes the smol CLI serve a machine
// (ServeMachine); exported for the CLI's dispatch.
const VMMCommand = vmmCommand

// VMMSource is where a machine's VMM process takes its guest from: a
// cold boot of the machine's disks (the zero value), a snapshot file
// (smol machine restore), or a fork's hand-over (the parent's state file
// and its sealed RAM, open files inherited from the parent's VMM).
type VMMSource struct {
	Snapshot string
	RAM      vmm.ForkRAM // with Snapshot: a fork's child
	// Ready, if set, is the write end of a pipe from the process that
	// started this VMM: one byte is written to it, and it is closed, once
	// the machine runs and its state says so, so that the starter learns
	// it at once instead of polling the state file.
	Ready *os.File
}

// ServeMachine is the body of a machine's VMM process: it boots (or
// restores) the machine, serves its control socket, and returns when the
// VM has ended. It holds the machine's VMM lock for its whole life, so
// that a second VMM for the same machine cannot start and a dead one is
// seen as dead.
func ServeMachine(name string, src VMMSource) (err error) {
	vmm.DedicatedProcess = true
	vmm.TracePhase("machine: VMM process of %s", name)
	st, err := machineStore()
	if err != nil {
		return err
	}
	spec, err := st.Load(name)
	if err != nil {
		return err
	}
	lock, err := st.TryLock(name, machine.VMMLock)
	if errors.Is(err, machine.ErrLocked) {
		return fmt.Errorf("machine %s is already running", name)
	}
	if err != nil {
		return err
	}
	defer lock.Unlock()
	pid, started := os.Getpid(), time.Now()
	defer func() {
		if err != nil {
			st.SetState(name, machine.Failed, pid, started, err.Error())
		}
	}()
	if err := st.SetState(name, machine.Starting, pid, started, ""); err != nil {
		return err
	}
	disks, cmdline, err := rootDisks(st, spec)
	if err != nil {
		return err
	}
	console, err := machine.OpenLog(st.Path(name, machine.ConsoleLog))
	if err != nil {
		return err
	}
	defer console.Close()
	fmt.Fprintf(console, "smol: starting machine %s at %s\n", name, started.UTC().Format(time.RFC3339))

	if _, err := st.SocketDir(name); err != nil {
		return err
	}
	vsockPath := st.SocketPath(name, machine.VsockSock)
	bootPath := fmt.Sprintf("%s_%d", vsockPath, agent.BootPort)
	os.Remove(vsockPath)
	os.Remove(bootPath)
	boot, err := net.Listen("unix", bootPath)
	if err != nil {
		return err
	}
	defer boot.Close()
	cfg := Config{
		Kernel: spec.Kernel, Initrd: spec.Agent,
		CPUs: spec.CPUs, Memory: spec.Memory, Console: console, IRQChip: spec.IRQChip,
		Disks:   disks,
		Cmdline: cmdline,
		Vsock:   &Vsock{Path: vsockPath},
	}
	for _, d := range spec.Disks {
		cfg.Disks = append(cfg.Disks, Disk{Path: d.Path, ReadOnly: d.ReadOnly})
	}
	if g := spec.GPU; g != nil {
		cfg.GPU = &GPU{Width: g.Width, Height: g.Height, Virgl: g.Virgl}
	}
	cfg.Volumes = spec.Volumes
	if n := spec.Net; n != nil {
		cfg.Net = &Net{AllowHosts: n.AllowHosts, AllowCIDRs: n.AllowCIDRs, DNS: n.DNS, Publish: n.Publish, NoEgress: n.NoEgress}
		egress, err := machine.OpenLog(st.Path(name, machine.EgressLog))
		if err != nil {
			return err
		}
		defer egress.Close()
		cfg.EgressLog = egress
	}
	b := &machineBackend{store: st, spec: spec, vsock: vsockPath, started: started}
	if err := b.start(cfg, src, boot); err != nil {
		return err
	}
	m := b.m
	defer m.Close()

	sock := st.SocketPath(name, machine.ControlSock)
	os.Remove(sock) // a dead VMM's: we hold the machine's lock
	ctl, err := net.Listen("unix", sock)
	if err != nil {
		m.Stop()
		return fmt.Errorf("control socket: %w", err)
	}
	os.Chmod(sock, 0o600)
	srv := machine.NewServer(b)
	go srv.Serve(ctl)
	defer func() {
		srv.Close()
		os.Remove(sock)
	}()
	if err := st.SetState(name, machine.Running, pid, started, ""); err != nil {
		m.Stop()
		return err
	}
	vmm.TracePhase("machine: running")
	if src.Ready != nil {
		src.Ready.Write([]byte{1}) // a starter that went away is no reason to stop
		src.Ready.Close()
	}
	exit, werr := m.Wait()
	// Why it ended goes into the console log too: a machine whose guest
	// powered itself off or reset leaves no error anywhere else.
	why := exit.Reason
	if werr != nil {
		why = werr.Error()
	} else if b.stopping.Load() {
		why = "stopped by the host"
	}
	fmt.Fprintf(console, "smol: machine %s ended at %s: %s\n", name, time.Now().UTC().Format(time.RFC3339), why)
	if werr != nil && !b.stopping.Load() {
		return werr
	}
	return st.SetState(name, machine.Stopped, 0, started, "")
}

// machineBackend is the VMM side of the control API.
type machineBackend struct {
	m        *Machine
	store    *machine.Store
	spec     *machine.Spec
	vsock    string
	started  time.Time
	stopping atomic.Bool
	// statesMu makes snapshots and forks one at a time: each pauses the
	// machine and decides whether to resume it.
	statesMu sync.Mutex
	// lastSilence is when DialAgent last logged the guest's activity
	// (unix nanoseconds), so that a guest that stopped answering is
	// described once, not by every retry.
	lastSilence atomic.Int64
}

// boot cold-boots the machine and waits for its agent's first call.
func (b *machineBackend) boot(cfg Config, boot net.Listener) (err error) {
	if cfg.Initrd == "" {
		if cfg.Initrd, err = DefaultAgentInitrd(); err != nil {
			return err
		}
	}
	if b.m, err = Start(cfg); err != nil {
		return err
	}
	conn, err := acceptAgent(boot, b.m)
	if err != nil {
		b.m.Stop()
		return err
	}
	start := agent.Start{Idle: true, Hostname: b.spec.GuestHostname(), Identity: &agent.Identity{Generation: b.spec.Generation}}
	hangUp := hangUpWhenStopped(conn, b.m.Done())
	_, err = agent.Run(conn, start, agent.Streams{})
	hangUp()
	conn.Close()
	if err != nil {
		b.m.Stop()
		return fmt.Errorf("guest agent: %w", err)
	}
	return nil
}

func (b *machineBackend) Info() machine.Info {
	state := machine.Running
	if b.m.vm.Paused() {
		state = machine.Paused
	}
	select {
	case <-b.m.Done():
		state = machine.Stopped
	default:
	}
	info := machine.Info{Name: b.spec.Name, State: state, PID: os.Getpid(), CPUs: b.spec.CPUs, Memory: b.spec.Memory,
		Started: b.started, HostMemory: selfRSS()}
	info.Image = rootName(b.spec)
	return info
}

// Display is the machine's screen, nil without --gpu. (A nil display
// must not become a non-nil interface.)
func (b *machineBackend) Display() machine.Display {
	if s := b.m.screen(); s != nil {
		return s
	}
	return nil
}

// Pause parks the vCPUs and records the state for readers of the files.
func (b *machineBackend) Pause() error {
	if err := b.m.Pause(); err != nil {
		return err
	}
	return b.store.SetState(b.spec.Name, machine.Paused, os.Getpid(), b.started, "")
}

// Resume lets the vCPUs run again.
func (b *machineBackend) Resume() error {
	if err := b.m.Resume(); err != nil {
		return err
	}
	return b.store.SetState(b.spec.Name, machine.Running, os.Getpid(), b.started, "")
}

// DialAgent connects to the guest agent's exec port through the vsock
// device's host socket ("CONNECT port" handshake).
func (b *machineBackend) DialAgent(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	dialled := time.Now()
	c, err := d.DialContext(ctx, "unix", b.vsock)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", agent.ExecPort); err != nil {
		c.Close()
		return nil, err
	}
	// Read the answer a byte at a time: what follows it is the stream.
	var line []byte
	one := make([]byte, 1)
	for len(line) < 64 {
		if _, err := c.Read(one); err != nil {
			c.Close()
			// A guest whose agent is not listening (yet: a restored
			// guest before its vsock reset) refuses at once, and
			// restores redial until it answers; only silence is news.
			if time.Since(dialled) >= silenceAfter {
				b.logSilence()
			}
			return nil, fmt.Errorf("vsock handshake: %w", err)
		}
		if one[0] == '\n' {
			break
		}
		line = append(line, one[0])
	}
	if !strings.HasPrefix(string(line), "OK ") {
		c.Close()
		return nil, fmt.Errorf("vsock handshake: %q", line)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// A handshake that failed after silenceAfter was not refused but went
// unanswered (the vsock device gives the guest 2 s); logSilence then
// watches the guest for silenceWindow, at most once per silenceInterval.
const (
	silenceAfter    = time.Second
	silenceWindow   = time.Second
	silenceInterval = 30 * time.Second
)

// logSilence writes to the VMM log what the guest did while its agent did
// not answer a connection (vmm.Machine.GuestActivity): whether it is alive
// at all, and where its devices' interrupts stand. It holds up the failed
// dial by silenceWindow.
func (b *machineBackend) logSilence() {
	now := time.Now().UnixNano()
	last := b.lastSilence.Load()
	if now-last < int64(silenceInterval) || !b.lastSilence.CompareAndSwap(last, now) {
		return
	}
	if activity := b.m.vm.GuestActivity(silenceWindow); activity != "" {
		slog.Warn("the guest agent did not answer a connection", "guest", activity)
	}
}

// Shutdown asks the agent for a clean power-off and stops the VM when it
// has not ended within timeout.
func (b *machineBackend) Shutdown(timeout time.Duration) error {
	b.stopping.Store(true)
	b.m.Resume() // a paused guest cannot shut itself down
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		conn, err := b.DialAgent(ctx)
		if err != nil {
			return
		}
		defer conn.Close()
		context.AfterFunc(ctx, func() { conn.Close() })
		agent.Run(conn, agent.Start{Idle: true, PowerOff: true}, agent.Streams{})
	}()
	select {
	case <-b.m.Done():
	case <-ctx.Done():
		b.m.Stop()
		<-b.m.Done()
	}
	return nil
}

// rootDisks returns the disks that hold a machine's root (its image,
// read-only, then its writable layer, made at the first start) and the
// kernel command line that tells the agent so. A machine in memory has
// none: the agent stays in its initramfs.
func rootDisks(st *machine.Store, spec *machine.Spec) ([]Disk, string, error) {
	if spec.InMemory {
		return nil, "", nil
	}
	if spec.Image == nil {
		return nil, "", errors.New("the machine has no image")
	}
	if _, err := os.Stat(spec.Image.Disk); err != nil {
		if spec.Pack != "" {
			return nil, "", fmt.Errorf("the files it shares with its pack (%s) are gone: create the machine again from the pack", filepath.Dir(spec.Image.Disk))
		}
		if spec.Image.Ref == BuiltinRoot {
			return nil, "", fmt.Errorf("its root, smol's busybox image %s, is no longer cached, and this smol's may differ: create the machine again", spec.Image.Digest)
		}
		return nil, "", fmt.Errorf("its image %s (%s) is no longer cached: pull it again (smol pull %s)", spec.Image.Ref, spec.Image.Digest, spec.Image.Ref)
	}
	storage := st.StoragePath(spec.Name)
	if err := ensureStorage(storage, spec.Storage); err != nil {
		return nil, "", fmt.Errorf("storage disk: %w", err)
	}
	disks := []Disk{
		{Path: spec.Image.Disk, ReadOnly: true, Serial: "smol-root"},
		{Path: storage, Serial: "smol-storage"},
	}
	return disks, "smol.root=/dev/vda smol.upper=/dev/vdb", nil
}

// ensureStorage creates the machine's writable layer the first time: an
// empty ext4 filesystem of size bytes in a sparse file (about one inode
// per 16 KiB, as mke2fs gives) with a journal, made under a temporary
// name and renamed into place.
func ensureStorage(path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	w, err := ext4fs.New(f, ext4fs.Options{MaxBytes: 1 << 20, Label: "smolstorage", Spare: size, Inodes: size / (16 << 10), Now: time.Now(),
		JournalBlocks: storageJournalBlocks(size)})
	if err == nil {
		_, err = w.Finish()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// storageJournalBlocks sizes the writable layer's journal as mke2fs
// would, about 1/64 of the disk between 4 MiB and 128 MiB: a guest stopped
// hard (or its VMM killed) then mounts a replayed filesystem, not a
// damaged one.
func storageJournalBlocks(size int64) uint32 {
	blocks := size / ext4fs.BlockSize / 64
	return uint32(min(max(blocks, 1024), 32768))
}

// selfRSS is this process's resident memory in bytes.
func selfRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

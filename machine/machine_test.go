package machine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "dev-1", "x.y_z", "A9", strings.Repeat("n", MaxNameLen)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "..", ".", "a/b", "-x", ".hidden", strings.Repeat("n", MaxNameLen+1), "x\x1b[2J", "a b", "é"} {
		err := ValidateName(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.ContainsAny(err.Error(), "\x1b\n") {
			t.Errorf("error for %q carries control bytes: %q", bad, err)
		}
	}
}

func testSpec(name string) *Spec {
	return &Spec{Name: name, Created: time.Now().UTC(), CPUs: 1, Memory: 256 << 20, Storage: 1 << 30,
		Image: &Image{Ref: "r", Digest: "sha256:00", Disk: "/x.ext4"}}
}

func TestCreateRaceHasOneWinner(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Create(testSpec("m"))
			if err == nil {
				wins.Add(1)
			} else if !errors.Is(err, ErrExists) {
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d creates won", wins.Load())
	}
	if _, err := s.Load("m"); err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(s.root)
	if len(des) != 1 {
		t.Errorf("machines dir holds %v", des)
	}
	if fi, _ := os.Stat(s.root); fi.Mode().Perm() != 0o700 {
		t.Errorf("machines dir is %v", fi.Mode())
	}
}

func TestDamagedRecordIsReported(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	if err := s.Create(testSpec("m")); err != nil {
		t.Fatal(err)
	}
	for _, junk := range []string{"{garbage", `{"version":9,"name":"m"}`, `{"version":1,"name":"other","cpus":1,"memory":268435456,"storage":1073741824}`, strings.Repeat(" ", maxSpec+10)} {
		os.WriteFile(s.Path("m", configFile), []byte(junk), 0o600)
		if _, err := s.Load("m"); err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("%.30q: %v", junk, err)
		}
	}
	if _, err := s.Load("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
}

func TestStatusSeesADeadVMM(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	s.Create(testSpec("m"))
	if st, _ := s.Status("m"); st.State != Created {
		t.Errorf("new: %s", st.State)
	}
	l, err := s.TryLock("m", VMMLock) // a VMM
	if err != nil {
		t.Fatal(err)
	}
	s.SetState("m", Running, 123, time.Now(), "")
	if st, _ := s.Status("m"); st.State != Running || st.PID != 123 {
		t.Errorf("alive: %+v", st)
	}
	if _, err := s.TryLock("m", VMMLock); !errors.Is(err, ErrLocked) {
		t.Errorf("second VMM lock: %v", err)
	}
	l.Unlock() // the VMM died without a word
	if st, _ := s.Status("m"); st.State != Failed || !strings.Contains(st.Error, "died") {
		t.Errorf("dead: %+v", st)
	}
	s.SetState("m", Stopped, 0, time.Now(), "")
	if st, _ := s.Status("m"); st.State != Stopped {
		t.Errorf("stopped: %+v", st)
	}
}

func TestRotatingLogIsBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "console.log")
	l, err := OpenLog(p)
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("x"), 999)
	for i := 0; i < 5000; i++ { // ~5 MiB
		l.Write(append(line, '\n'))
	}
	l.Close()
	var total int64
	for _, f := range []string{p, p + ".1"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > 2*MaxLog {
		t.Errorf("logs hold %d bytes", total)
	}
}

// TestTailSinceShowsOnlyThisBoot: a start reads back only what its own
// guest wrote after an earlier boot's output, bounded, and all of a log
// that was rotated (shorter than the offset) in between.
func TestTailSinceShowsOnlyThisBoot(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.TailSince("m", 0, 100); got != nil || s.ConsoleSize("m") != 0 {
		t.Fatalf("no log: %q, size %d", got, s.ConsoleSize("m"))
	}
	os.MkdirAll(filepath.Dir(s.Path("m", ConsoleLog)), 0o700)
	os.WriteFile(s.Path("m", ConsoleLog), []byte("earlier boot\n"), 0o600)
	before := s.ConsoleSize("m")
	if got := s.TailSince("m", before, 100); len(got) != 0 {
		t.Fatalf("nothing new yet, got %q", got)
	}
	f, _ := os.OpenFile(s.Path("m", ConsoleLog), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("Kernel panic - not syncing\n")
	f.Close()
	if got := string(s.TailSince("m", before, 100)); got != "Kernel panic - not syncing\n" {
		t.Errorf("this boot's output: %q", got)
	}
	if got := string(s.TailSince("m", before, 6)); got != "ncing\n" {
		t.Errorf("bounded to 6 bytes: %q", got)
	}
	os.WriteFile(s.Path("m", ConsoleLog), []byte("rotated\n"), 0o600)
	if got := string(s.TailSince("m", before, 100)); got != "rotated\n" {
		t.Errorf("after a rotation: %q", got)
	}
}

// fakeVMM is a Backend whose "agent" echoes what it is sent.
type fakeVMM struct {
	state        State
	stopped      chan time.Duration
	dialErrs     bool
	snapshot     string
	withoutDisks bool
	forked       []ForkRequest
	display      Display
}

func (f *fakeVMM) Info() Info { return Info{Name: "m", State: f.state, CPUs: 1} }
func (f *fakeVMM) DialAgent(ctx context.Context) (net.Conn, error) {
	if f.dialErrs {
		return nil, errors.New("no agent")
	}
	// A real socket: the relay half-closes it, which net.Pipe cannot.
	l, err := net.Listen("unix", filepath.Join(os.TempDir(), "fake-agent-"+randomHex()+".sock"))
	if err != nil {
		return nil, err
	}
	defer os.Remove(l.Addr().String())
	defer l.Close()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		return nil, err
	}
	b, err := l.Accept()
	if err != nil {
		a.Close()
		return nil, err
	}
	go func() {
		io.Copy(b, b)
		b.Close()
	}()
	return a, nil
}
func (f *fakeVMM) Shutdown(d time.Duration) error { f.stopped <- d; return nil }
func (f *fakeVMM) Pause() error                   { f.state = Paused; return nil }
func (f *fakeVMM) Resume() error                  { f.state = Running; return nil }
func (f *fakeVMM) Snapshot(r SnapshotRequest) error {
	f.snapshot, f.withoutDisks = r.Path, r.WithoutDisks
	return nil
}
func (f *fakeVMM) Fork(r ForkRequest) error { f.forked = append(f.forked, r); return nil }
func (f *fakeVMM) Display() Display         { return f.display }

// TestSnapshotAndForkRequests: the API passes good requests on and
// refuses bad ones itself, before the VMM sees them.
func TestSnapshotAndForkRequests(t *testing.T) {
	f := &fakeVMM{state: Running}
	c := serve(t, f)
	ctx := context.Background()
	if err := c.Snapshot(ctx, SnapshotRequest{Path: "relative/m.snap"}); err == nil || f.snapshot != "" {
		t.Errorf("a relative snapshot path: %v", err)
	}
	if err := c.Snapshot(ctx, SnapshotRequest{Path: "/tmp/m.snap", WithoutDisks: true}); err != nil || f.snapshot != "/tmp/m.snap" || !f.withoutDisks {
		t.Errorf("snapshot: %v, %q, without disks %v", err, f.snapshot, f.withoutDisks)
	}
	many := make([]string, MaxForkChildren+1)
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	for _, bad := range []ForkRequest{{}, {Names: []string{"a", "a"}}, {Names: []string{"../x"}}, {Names: many}} {
		if err := c.Fork(ctx, bad); err == nil {
			t.Errorf("fork %v accepted", bad.Names)
		}
	}
	if len(f.forked) != 0 {
		t.Fatalf("bad fork requests reached the VMM: %v", f.forked)
	}
	if err := c.Fork(ctx, ForkRequest{Names: []string{"a", "b"}, Template: true}); err != nil || len(f.forked) != 1 || !f.forked[0].Template {
		t.Errorf("fork: %v, %v", err, f.forked)
	}
}

func serve(t *testing.T, b Backend) *Client {
	sock := filepath.Join(t.TempDir(), "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(b)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return NewClient(sock)
}

func TestControlAPI(t *testing.T) {
	f := &fakeVMM{state: Running, stopped: make(chan time.Duration, 1)}
	c := serve(t, f)
	ctx := context.Background()
	info, err := c.Status(ctx)
	if err != nil || info.Name != "m" || info.State != Running {
		t.Fatalf("status: %+v %v", info, err)
	}
	conn, err := c.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("relay"), 100000)
	go func() { conn.Write(payload); conn.(interface{ CloseWrite() error }).CloseWrite() }()
	got, _ := io.ReadAll(conn)
	conn.Close()
	if !bytes.Equal(got, payload) {
		t.Errorf("exec relay: %d bytes back of %d", len(got), len(payload))
	}
	if err := c.Stop(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := <-f.stopped; d != 3*time.Second {
		t.Errorf("stop timeout %v", d)
	}
	if err := c.Pause(ctx); err != nil || f.state != Paused {
		t.Fatalf("pause: %v, %s", err, f.state)
	}
	if _, err := c.Exec(ctx); err == nil || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("exec while paused: %v", err)
	}
	if err := c.Resume(ctx); err != nil || f.state != Running {
		t.Fatalf("resume: %v, %s", err, f.state)
	}
	f.state = Stopped
	if _, err := c.Exec(ctx); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("exec while stopped: %v", err)
	}
	f.state, f.dialErrs = Running, true
	if _, err := c.Exec(ctx); err == nil || !strings.Contains(err.Error(), "no agent") {
		t.Errorf("exec without an agent: %v", err)
	}
	if err := c.call(ctx, "POST", "/v1/stop", map[string]string{"timeout": "-1s"}, nil); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative timeout: %v", err)
	}
	if err := c.call(ctx, "GET", "/v2/status", nil, nil); err == nil || !strings.Contains(err.Error(), "no endpoint") {
		t.Errorf("unknown path: %v", err)
	}
	if _, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Status(ctx); !errors.Is(err, ErrNoVMM) {
		t.Errorf("no socket: %v", err)
	}
}

// Probing liveness never takes the VMM's lock: a VMM starting while
// clients poll its state always gets it (a probe that took the lock for an
// instant once made a start fail with "already running").
func TestAliveProbeNeverBlocksTheVMM(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	s.Create(testSpec("m"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					s.Alive("m")
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		l, err := s.TryLock("m", VMMLock)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("attempt %d: a probe blocked the VMM's lock: %v", i, err)
		}
		if !s.Alive("m") {
			t.Fatalf("attempt %d: the held lock reads as dead", i)
		}
		l.Unlock()
	}
	close(stop)
	wg.Wait()
	if s.Alive("m") {
		t.Error("alive after the last unlock")
	}
}

// TestValidateHostname: what a guest may be named (RFC 1123, the kernel's
// 64 bytes), and a spec with anything else is refused.
func TestValidateHostname(t *testing.T) {
	for _, ok := range []string{"a", "pod-1", "web.example.org", "A9", strings.Repeat("a", 63), strings.Repeat("a.", 31) + "bc"} {
		if err := ValidateHostname(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "a..b", ".a", "a.", "a_b", "a b", "a\nb", "é", "a/b", strings.Repeat("a", 65), "\x1b[2J"} {
		if ValidateHostname(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := &Spec{Version: SpecVersion, Name: "m", CPUs: 1, Memory: 256 << 20, Storage: 1 << 30}
	if err := s.check(); err != nil || s.GuestHostname() != "m" {
		t.Fatalf("no host name: %v, guest named %q", err, s.GuestHostname())
	}
	s.Hostname = "pod-1"
	if err := s.check(); err != nil || s.GuestHostname() != "pod-1" {
		t.Fatalf("host name pod-1: %v, guest named %q", err, s.GuestHostname())
	}
	s.Hostname = "bad_name"
	if s.check() == nil {
		t.Error("a spec with host name bad_name passes its check")
	}
}

// A machine in memory has no writable layer nor image; any other machine
// has a writable layer in range. A record saying otherwise is corrupt.
func TestSpecInMemory(t *testing.T) {
	s := &Spec{Version: SpecVersion, Name: "m", CPUs: 1, Memory: 256 << 20, InMemory: true}
	if err := s.check(); err != nil {
		t.Fatalf("a machine in memory is refused: %v", err)
	}
	s.Storage = 1 << 30
	if s.check() == nil {
		t.Error("a machine in memory with a writable layer passes its check")
	}
	s.Storage, s.Image = 0, &Image{Ref: "busybox", Digest: "sha256:0", Disk: "/x"}
	if s.check() == nil {
		t.Error("a machine in memory with an image passes its check")
	}
	s.Image, s.InMemory = nil, false
	if s.check() == nil {
		t.Error("a machine on disks without a writable layer passes its check")
	}
}

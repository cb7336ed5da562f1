package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	big := bytes.Repeat([]byte("x"), MaxFrame+10)
	w.Write(FrameStdout, []byte("hello"))
	w.Write(FrameStdinClose, nil)
	w.Write(FrameStderr, big)
	r := NewReader(&buf)
	want := []Frame{{FrameStdout, []byte("hello")}, {FrameStdinClose, []byte{}}, {FrameStderr, big[:MaxFrame]}, {FrameStderr, big[MaxFrame:]}}
	for i, wf := range want {
		f, err := r.Read()
		if err != nil || f.Type != wf.Type || !bytes.Equal(f.Payload, wf.Payload) {
			t.Fatalf("frame %d: %v %d bytes, %v; want %v %d bytes", i, f.Type, len(f.Payload), err, wf.Type, len(wf.Payload))
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestHostileFramesAreRefused(t *testing.T) {
	header := func(t FrameType, n uint32) []byte {
		b := []byte{byte(t), 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return b
	}
	if _, err := NewReader(bytes.NewReader(header(FrameStdout, MaxFrame+1))).Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized frame: %v, want ErrFrameTooLarge", err)
	}
	truncated := append(header(FrameStdout, 10), "abc"...)
	if _, err := NewReader(bytes.NewReader(truncated)).Read(); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
	}
	for _, bad := range []string{`{`, `{"args":[]}`, `{"args":[""]}`, `{"args":["x"],"env":["NOEQUALS"]}`} {
		if _, err := DecodeStart([]byte(bad)); err == nil {
			t.Errorf("DecodeStart(%s) accepted", bad)
		}
	}
	for _, bad := range []string{`{"code":-1}`, `{"code":256}`, `nope`} {
		if _, err := DecodeExit([]byte(bad)); err == nil {
			t.Errorf("DecodeExit(%s) accepted", bad)
		}
	}
	if _, err := DecodeResize([]byte{1, 2, 3}); err == nil {
		t.Error("DecodeResize of 3 bytes accepted")
	}
}

// TestRunRelaysStreamsSignalsAndExit plays the guest side of one session
// over an in-memory pipe.
func TestRunRelaysStreamsSignalsAndExit(t *testing.T) {
	hostEnd, guestEnd := pipePair()
	signals := make(chan syscall.Signal, 1)
	signals <- syscall.SIGTERM
	guestDone := make(chan error, 1)
	go func() {
		guestDone <- func() error {
			r, w := NewReader(guestEnd), NewWriter(guestEnd)
			f, err := r.Read()
			if err != nil || f.Type != FrameStart {
				return errors.New("no start frame")
			}
			start, err := DecodeStart(f.Payload)
			if err != nil || start.Args[0] != "cat" || !start.Stdin {
				return errors.New("bad start")
			}
			var stdin []byte
			gotSignal := false
			for !gotSignal || stdin == nil || !bytes.HasSuffix(stdin, []byte("\x00eof")) {
				f, err := r.Read()
				if err != nil {
					return err
				}
				switch f.Type {
				case FrameStdin:
					stdin = append(stdin, f.Payload...)
				case FrameStdinClose:
					stdin = append(stdin, "\x00eof"...)
				case FrameSignal:
					gotSignal = len(f.Payload) == 1 && f.Payload[0] == byte(syscall.SIGTERM)
				}
			}
			w.Write(FrameStdout, bytes.TrimSuffix(stdin, []byte("\x00eof")))
			w.Write(FrameStderr, []byte("warning\n"))
			return w.Write(FrameExit, []byte(`{"code":143,"signal":15}`))
		}()
	}()
	var stdout, stderr bytes.Buffer
	exit, err := Run(hostEnd, Start{Args: []string{"cat"}}, Streams{
		Stdin: strings.NewReader("input"), Stdout: &stdout, Stderr: &stderr, Signals: signals,
	})
	if gerr := <-guestDone; gerr != nil {
		t.Fatalf("guest side: %v", gerr)
	}
	if err != nil || exit.Code != 143 || stdout.String() != "input" || stderr.String() != "warning\n" {
		t.Fatalf("Run = %+v, %v; stdout %q, stderr %q", exit, err, stdout.String(), stderr.String())
	}
}

func TestRunReportsAGuestThatHangsUp(t *testing.T) {
	hostEnd, guestEnd := pipePair()
	go func() {
		NewReader(guestEnd).Read()
		guestEnd.Close()
	}()
	if _, err := Run(hostEnd, Start{Args: []string{"true"}}, Streams{}); !errors.Is(err, ErrNoExit) {
		t.Fatalf("Run = %v, want ErrNoExit", err)
	}
}

// TestRunReportsTheStartOnce: a Started frame calls Streams.Started
// before the exit is returned; a guest that says it twice is refused.
func TestRunReportsTheStartOnce(t *testing.T) {
	for _, times := range []int{0, 1, 2} {
		hostEnd, guestEnd := pipePair()
		go func() {
			NewReader(guestEnd).Read()
			w := NewWriter(guestEnd)
			for range times {
				w.Write(FrameStarted, nil)
			}
			w.Write(FrameExit, []byte(`{"code":0}`))
			guestEnd.Close()
		}()
		calls := 0
		exit, err := Run(hostEnd, Start{Args: []string{"true"}}, Streams{Started: func() { calls++ }})
		switch {
		case times < 2 && (err != nil || exit.Code != 0 || calls != times):
			t.Errorf("%d Started frames: Run = %+v, %v; Started called %d times", times, exit, err, calls)
		case times == 2 && (err == nil || calls != 1):
			t.Errorf("two Started frames: Run = %+v, %v (want refused); Started called %d times", exit, err, calls)
		}
	}
}

// pipeEnd is one end of a bidirectional in-memory stream.
type pipeEnd struct {
	io.Reader
	io.WriteCloser
}

func (p pipeEnd) Close() error { return p.WriteCloser.Close() }

func pipePair() (pipeEnd, pipeEnd) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return pipeEnd{ar, aw}, pipeEnd{br, bw}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte{6, 0, 0, 0, 2, 'h', 'i', 8, 0, 0, 0, 10, '{', '"', 'c', 'o', 'd', 'e', '"', ':', '0', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			if len(f.Payload) > MaxFrame {
				t.Fatalf("frame of %d bytes accepted", len(f.Payload))
			}
			switch f.Type {
			case FrameStart:
				DecodeStart(f.Payload)
			case FrameExit:
				DecodeExit(f.Payload)
			case FrameResize:
				DecodeResize(f.Payload)
			}
		}
	})
}

// TestClockSyncUsesTheQuickestAnswer: the guest's side (AskClock) against a
// host whose clock is an hour ahead and whose first answer is 300 ms late
// (a busy host): the estimate is the host's clock to within a few
// milliseconds, not 150 ms off.
func TestClockSyncUsesTheQuickestAnswer(t *testing.T) {
	hostEnd, guestEnd := pipePair()
	const ahead = time.Hour
	go func() {
		r, w := NewReader(hostEnd), NewWriter(hostEnd)
		for i := 0; ; i++ {
			f, err := r.Read()
			if err != nil || f.Type != FrameTimeQuery {
				return
			}
			if i == 0 {
				time.Sleep(300 * time.Millisecond)
			}
			w.Write(FrameTime, EncodeTime(time.Now().Add(ahead).UnixNano()))
		}
	}()
	estimate, at, err := AskClock(NewReader(guestEnd), NewWriter(guestEnd))
	if err != nil {
		t.Fatal(err)
	}
	if off := time.Duration(estimate - at.Add(ahead).UnixNano()); off < -20*time.Millisecond || off > 20*time.Millisecond {
		t.Errorf("the estimate is %v off the host's clock", off)
	}
}

// TestRunAnswersClockQueriesOnlyWhereAsked: Run answers the guest's time
// queries in a SyncClock session, ClockSamples of them, and ends a session
// whose guest asks more, or asks without SyncClock.
func TestRunAnswersClockQueriesOnlyWhereAsked(t *testing.T) {
	for _, tc := range []struct {
		sync    bool
		queries int
		ok      bool
	}{{true, ClockSamples, true}, {true, ClockSamples + 1, false}, {false, 1, false}} {
		hostEnd, guestEnd := pipePair()
		guestDone := make(chan error, 1)
		go func() {
			guestDone <- func() error {
				r, w := NewReader(guestEnd), NewWriter(guestEnd)
				if f, err := r.Read(); err != nil || f.Type != FrameStart {
					return errors.New("no start frame")
				}
				for range tc.queries {
					before := time.Now().UnixNano()
					w.Write(FrameTimeQuery, nil)
					f, err := r.Read()
					if err != nil {
						return nil // the host ended the session
					}
					host, err := DecodeTime(f.Payload)
					if f.Type != FrameTime || err != nil || host < before || host > time.Now().UnixNano() {
						return fmt.Errorf("answer %s %v %d", f.Type, err, host)
					}
				}
				return w.Write(FrameExit, []byte(`{"code":0}`))
			}()
		}()
		_, err := Run(hostEnd, Start{Idle: true, Identity: &Identity{SyncClock: tc.sync}}, Streams{})
		hostEnd.Close()
		if gerr := <-guestDone; gerr != nil {
			t.Fatalf("sync %v, %d queries: guest side: %v", tc.sync, tc.queries, gerr)
		}
		if (err == nil) != tc.ok {
			t.Errorf("sync %v, %d queries: Run = %v; want ok %v", tc.sync, tc.queries, err, tc.ok)
		}
	}
}

// TestStartValidation: the checks a Start passes before it is sent.
func TestStartValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Start
		ok   bool
	}{
		{"plain", Start{Args: []string{"true"}}, true},
		{"read-only root", Start{Args: []string{"true"}, Root: "/r", ReadOnlyRoot: true, Groups: []uint32{1, 2}}, true},
		{"read-only without a root", Start{Args: []string{"true"}, ReadOnlyRoot: true}, false},
		{"a relative program path", Start{Args: []string{"sh"}, Root: "/r", Path: "bin/sh"}, false},
		{"an absolute program path", Start{Args: []string{"sh"}, Root: "/r", Path: "/bin/sh"}, true},
		{"read-only with volumes", Start{Args: []string{"true"}, Root: "/r", ReadOnlyRoot: true, WritablePaths: []string{"/data", "/etc/hosts"}}, true},
		{"writable paths in a writable root", Start{Args: []string{"true"}, Root: "/r", WritablePaths: []string{"/data"}}, false},
		{"a /dev mount", Start{Args: []string{"true"}, Root: "/r", DevMounts: []string{"/dev/termination-log"}}, true},
		{"a /dev mount outside /dev", Start{Args: []string{"true"}, Root: "/r", DevMounts: []string{"/devices"}}, false},
		{"a /dev mount without a root", Start{Args: []string{"true"}, DevMounts: []string{"/dev/x"}}, false},
		{"relative writable path", Start{Args: []string{"true"}, Root: "/r", ReadOnlyRoot: true, WritablePaths: []string{"data"}}, false},
		{"relative root", Start{Args: []string{"true"}, Root: "r"}, false},
		{"too many groups", Start{Args: []string{"true"}, Groups: make([]uint32, MaxGroups+1)}, false},
		{"no command", Start{}, false},
		{"capabilities", Start{Args: []string{"true"}, Capabilities: &Capabilities{Bounding: []uint8{0, 40}, Ambient: []uint8{13}}}, true},
		{"capability past 63", Start{Args: []string{"true"}, Capabilities: &Capabilities{Permitted: []uint8{64}}}, false},
		{"a new PID namespace", Start{Args: []string{"true"}, Root: "/r", PIDNamespace: "c1", NewPIDNamespace: true}, true},
		{"a new PID namespace without a name", Start{Args: []string{"true"}, Root: "/r", NewPIDNamespace: true}, false},
		{"a PID namespace without a root", Start{Args: []string{"true"}, PIDNamespace: "c1"}, false},
		{"a cgroup", Start{Args: []string{"true"}, Cgroup: "abc-1.2_3"}, true},
		{"a cgroup path", Start{Args: []string{"true"}, Cgroup: "../escape"}, false},
		{"a cgroup named ..", Start{Args: []string{"true"}, Cgroup: ".."}, false},
		{"stats", Start{Stats: "abc"}, true},
		{"stats of a path", Start{Stats: "a/b"}, false},
		{"stats with a command", Start{Stats: "abc", Args: []string{"true"}}, false},
		{"masked and read-only paths", Start{Args: []string{"true"}, Root: "/r", MaskedPaths: []string{"/proc/kcore"}, ReadOnlyPaths: []string{"/proc/sys"}}, true},
		{"masked paths without a root", Start{Args: []string{"true"}, MaskedPaths: []string{"/proc/kcore"}}, false},
		{"a relative masked path", Start{Args: []string{"true"}, Root: "/r", MaskedPaths: []string{"proc/kcore"}}, false},
		{"a relative read-only path", Start{Args: []string{"true"}, Root: "/r", ReadOnlyPaths: []string{""}}, false},
		{"limits", Start{Args: []string{"true"}, Cgroup: "c", Limits: &CgroupLimits{MemoryMax: 1 << 20, PidsMax: 5, CPUWeight: 10000, CPUQuotaUsec: 1000, CPUPeriodUsec: 1000000}}, true},
		{"limits without a cgroup", Start{Args: []string{"true"}, Limits: &CgroupLimits{}}, false},
		{"a CPU weight past 10000", Start{Args: []string{"true"}, Cgroup: "c", Limits: &CgroupLimits{CPUWeight: 10001}}, false},
		{"a CPU period under 1 ms", Start{Args: []string{"true"}, Cgroup: "c", Limits: &CgroupLimits{CPUPeriodUsec: 999}}, false},
		{"a CPU period over 1 s", Start{Args: []string{"true"}, Cgroup: "c", Limits: &CgroupLimits{CPUPeriodUsec: 1000001}}, false},
		{"a CPU quota under 1 ms", Start{Args: []string{"true"}, Cgroup: "c", Limits: &CgroupLimits{CPUQuotaUsec: 999}}, false},
		{"an update", Start{Update: "c", Limits: &CgroupLimits{MemoryMax: 1 << 30}}, true},
		{"an update without limits", Start{Update: "c"}, false},
		{"an update with a command", Start{Update: "c", Limits: &CgroupLimits{}, Args: []string{"true"}}, false},
		{"an update of a path", Start{Update: "../c", Limits: &CgroupLimits{}}, false},
		{"an update with bad limits", Start{Update: "c", Limits: &CgroupLimits{CPUWeight: 20000}}, false},
		{"stats and an update", Start{Stats: "c", Update: "c", Limits: &CgroupLimits{}}, false},
		{"stats with limits", Start{Stats: "c", Limits: &CgroupLimits{}}, false},
	} {
		if err := c.s.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v", c.name, err)
		}
	}
}

// TestCapabilityNames: OCI names map to the kernel's numbers, with or
// without the prefix, in any case; unknown names are refused.
func TestCapabilityNames(t *testing.T) {
	for name, want := range map[string]uint8{"CAP_CHOWN": 0, "CAP_NET_ADMIN": 12, "net_raw": 13, "CAP_SYS_ADMIN": 21, "CAP_CHECKPOINT_RESTORE": 40} {
		if got, ok := CapabilityNumber(name); !ok || got != want {
			t.Errorf("%s: %d, %v; want %d", name, got, ok, want)
		}
	}
	if _, ok := CapabilityNumber("CAP_FLY"); ok {
		t.Error("an unknown capability was given a number")
	}
	if m := Mask([]uint8{0, 13, 40}); m != 1|1<<13|1<<40 {
		t.Errorf("mask %#x", m)
	}
}

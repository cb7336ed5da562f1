package box

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLifeVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	const watchdog = 10 * time.Second
	cases := []struct {
		name       string
		feed       func(l *life)
		now        float64
		hung       bool
		kernelOK   bool
		wantInWhat string
	}{
		{"booting, longer than the watchdog", func(l *life) {}, 100, false, false, ""},
		{"never reported", func(l *life) {}, bootGrace.Seconds(), true, false, "never reported"},
		{"9p never answered", func(l *life) {
			for s := 2.0; s < 200; s += 2 {
				l.line("alive 5.00 1.00", at(s))
			}
		}, 200, true, true, "9p"},
		{"beats and 9p answers", func(l *life) {
			for s := 2.0; s < 30; s += 2 {
				l.line("alive 5.00 1.00", at(s))
				l.line("9p 5.10 1.00", at(s))
			}
		}, 35, false, false, ""},
		{"beats stopped", func(l *life) {
			l.line("alive 3.21 1.00", at(2))
			l.line("9p 3.30 1.00", at(2))
		}, 12.5, true, false, "last heartbeat at box uptime 3.30 s"},
		{"console output is life too", func(l *life) {
			l.line("9p 1 1", at(8))
			l.console(at(9))
		}, 17, false, false, ""},
		{"both stopped, 9p a little earlier", func(l *life) {
			l.line("9p 3.00 1.00", at(2))
			l.line("alive 4.50 1.00", at(3.5))
		}, 12.5, false, false, ""},
		{"both stopped, kernel's silence reported", func(l *life) {
			l.line("9p 3.00 1.00", at(2))
			l.line("alive 4.50 1.00", at(3.5))
		}, 13.5, true, false, "no sign of life for 10 s"},
		{"kernel alive, 9p silent", func(l *life) {
			for s := 2.0; s <= 20; s += 2 {
				l.line("alive 5.00 1.00", at(s))
			}
			l.line("9p 5.00 1.00", at(4))
		}, 14, true, true, "9p"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLife(t0)
			c.feed(l)
			h, hung := l.verdict(at(c.now), watchdog)
			if hung != c.hung || hung && h.kernelOK != c.kernelOK {
				t.Fatalf("verdict at %v s = %+v, %v; want hung %v, kernel alive %v", c.now, h, hung, c.hung, c.kernelOK)
			}
			if hung && !strings.Contains(h.what(), c.wantInWhat) {
				t.Errorf("report %q lacks %q", h.what(), c.wantInWhat)
			}
		})
	}
}

func TestLifeCarriesStatusAndTasks(t *testing.T) {
	l := newLife(time.Now())
	l.read(strings.NewReader("alive 1.0 0.5\nstatus 7\ntask 12 D u p9_client_rpc smol\ntask 13 S k kthreadd kthreadd\ntasks-end\ngarbage\n"))
	if code, ok := l.exitStatus(); !ok || code != 7 {
		t.Errorf("exitStatus = %d, %v; want 7, true", code, ok)
	}
	select {
	case dump := <-l.tasks:
		if len(dump) != 2 || dump[0] != "12 D u p9_client_rpc smol" {
			t.Errorf("task dump = %q", dump)
		}
	default:
		t.Fatal("no task dump delivered")
	}
}

func TestSummarizeTasksPutsBlockedFirstAndDropsIdleKernelThreads(t *testing.T) {
	dump := []string{
		"1 S u do_wait init",
		"20 S u futex_wait_queue smol",
		"21 S u futex_wait_queue smol",
		"22 D u p9_client_rpc smol",
		"30 S k smpboot_thread_fn ksoftirqd/0",
		"31 D k p9_client_rpc kworker/0:1",
		"40 R u 0 busy",
	}
	got := summarizeTasks(dump, 20)
	want := []string{
		"  1× D kworker/0:1      in p9_client_rpc",
		"  1× D smol             in p9_client_rpc",
		"  1× R busy             in -",
		"  2× S smol             in futex_wait_queue",
		"  1× S init             in do_wait",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("summary:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := summarizeTasks(dump, 2); len(got) != 3 || !strings.Contains(got[2], "3 more") {
		t.Errorf("capped summary = %q", got)
	}
}

func TestConsoleTailKeepsLastLinesAndPassesEverythingOn(t *testing.T) {
	var out bytes.Buffer
	l := newLife(time.Unix(0, 0))
	c := &consoleTail{w: &out, life: l}
	if got := c.tail(); got != " (nothing)" {
		t.Errorf("empty tail = %q", got)
	}
	var all strings.Builder
	for i := 0; i < 12; i++ {
		all.WriteString("line " + string(rune('a'+i)) + "\r\n")
	}
	all.WriteString("esc \x1b[0m and a partial")
	in := all.String()
	for i := 0; i < len(in); i += 5 { // in pieces, split anywhere
		j := min(i+5, len(in))
		c.Write([]byte(in[i:j]))
	}
	if out.String() != in {
		t.Error("console output was not passed on unchanged")
	}
	tail := c.tail()
	if strings.Contains(tail, "line d") || !strings.Contains(tail, "line e") || !strings.Contains(tail, "line l") {
		t.Errorf("tail does not hold the last %d lines:%s", tailLines, tail)
	}
	if !strings.HasSuffix(tail, "esc ?[0m and a partial") || strings.Contains(tail, "\r") {
		t.Errorf("tail's last line = %q", tail)
	}
	if l.lastAlive.Equal(time.Unix(0, 0)) {
		t.Error("console output did not count as a sign of life")
	}
}

func TestParseRegistersAndSymbols(t *testing.T) {
	dump := "CPU#0\nRAX=0000000000000000 RBX=ffffffff82a0c940\n" +
		"RIP=ffffffff81443efb RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n" +
		"CPU#1\nRAX=0000000000000001\nRIP=00007f0012345678 RFL=00000202 [-------] CPL=3 II=0 A20=1 SMM=0 HLT=0\n"
	dump += "CPU#2\nEAX=00000000 EBX=00000000\nEIP=0000fff0 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=1\nCPU#3\n"
	cpus := parseRegisters(dump)
	want := []vcpu{{n: 0, rip: 0xffffffff81443efb, cpl: 0, halted: true, intsOn: true},
		{n: 1, rip: 0x7f0012345678, cpl: 3, intsOn: true}, {n: 2, rip: 0xfff0, cpl: 0, halted: true, legacy: true}}
	if !reflect.DeepEqual(cpus, want) {
		t.Fatalf("parseRegisters = %+v, want %+v", cpus, want)
	}
	syms := &symbols{addrs: []uint64{0xffffffff81000000, 0xffffffff81443ee8}, names: []string{"_stext", "default_idle"}}
	// QEMU 7.2's `info lapic`, shortened.
	lapic := "dumping local APIC state for CPU 0\n\nLVT0\t 0x00010700 active-hi edge  masked                      ExtINT (vec 0)\n" +
		"Timer\t DCR=0x3 (divide by 16) initial_count = 61934 current_count = 0\nESR\t 0x00000000\nISR\t 236 \nIRR\t 236 253 \n\n" +
		"APR 0x00 TPR 0x00 DFR 0x0f LDR 0x01 PPR 0xe0\n"
	apic := parseAPIC(lapic)
	if got, want := apic.String(), "ISR 236, IRR 236 253, TPR 0x00, PPR 0xe0"; got != want {
		t.Errorf("parseAPIC(...).String() = %q, want %q", got, want)
	}
	if v, ok := apic.pending(); !ok || v != 253 {
		t.Errorf("pending = %d, %v; want 253 (above PPR 0xe0's class)", v, ok)
	}
	cpus[0].apic, cpus[0].apicRead = apic, true
	guestSyms := &symbols{addrs: []uint64{0xffffffff81443e00}, names: []string{"queued_spin_lock_slowpath"}}
	report := describeVCPUs(cpus, syms, guestSyms)
	for _, w := range []string{"CPU 0: RIP 0xffffffff81443efb default_idle+0x13 (or, in a nested guest on smol's kernel, queued_spin_lock_slowpath+0xfb), halted (waiting for an interrupt); local APIC: ISR 236,",
		"CPU 1: RIP 0x7f0012345678 (user space)\n", "CPU 2: RIP 0xfff0 (not in 64-bit mode"} {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:%s", w, report)
		}
	}
}

func TestLimitFromEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", 42 * time.Second, false},
		{"90", 90 * time.Second, false},
		{"2m", 2 * time.Minute, false},
		{"off", -1, false},
		{"0", -1, false},
		{"soon", 0, true},
		{"-5s", 0, true},
	} {
		t.Setenv("SMOLBOX_TEST_LIMIT", c.env)
		got, err := limit(0, "SMOLBOX_TEST_LIMIT", 42*time.Second)
		if (err != nil) != c.bad || !c.bad && got != c.want {
			t.Errorf("limit with %q = %v, %v; want %v (error: %v)", c.env, got, err, c.want, c.bad)
		}
	}
	t.Setenv("SMOLBOX_TEST_LIMIT", "soon")
	if got, err := limit(time.Minute, "SMOLBOX_TEST_LIMIT", 0); err != nil || got != time.Minute {
		t.Errorf("an option set in code = %v, %v; want it to win over the environment", got, err)
	}
}

// TestQMPSkipsEventsAndTimesOut plays QEMU's side of a monitor session.
func TestQMPSkipsEventsAndTimesOut(t *testing.T) {
	harness, qemu := net.Pipe()
	defer harness.Close()
	go func() {
		defer qemu.Close()
		dec, enc := json.NewDecoder(qemu), json.NewEncoder(qemu)
		enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{}}})
		var req map[string]any
		for dec.Decode(&req) == nil {
			switch req["execute"] {
			case "qmp_capabilities":
				enc.Encode(map[string]any{"return": map[string]any{}})
			case "query-status":
				enc.Encode(map[string]any{"event": "STOP", "data": map[string]any{}})
				enc.Encode(map[string]any{"return": map[string]any{"status": "paused", "running": false}})
			case "human-monitor-command":
				enc.Encode(map[string]any{"error": map[string]any{"class": "GenericError", "desc": "no such command"}})
			case "hang":
				// answer nothing: a stuck QEMU
			}
		}
	}()
	q, err := newQMP(harness)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q.status(); err != nil || st != "paused" {
		t.Errorf("status = %q, %v; want paused", st, err)
	}
	if _, err := q.hmp("info nothing"); err == nil || !strings.Contains(err.Error(), "no such command") {
		t.Errorf("hmp error = %v", err)
	}
	q.timeout = 200 * time.Millisecond // a test that hangs here has lost its deadline
	if _, err := q.execute("hang", nil); err == nil {
		t.Fatal("a monitor that never answers did not fail")
	}
	var ne net.Error
	if _, err := q.status(); !errors.As(err, &ne) {
		t.Errorf("after a timeout the session must stay failed, got %v", err)
	}
}

func TestHungAndCrashedBoxesAreRerunButTimeoutsAreNot(t *testing.T) {
	hung := &reportError{ErrBoxHung, "no sign of life for 120 s"}
	timedOut := &reportError{ErrTimeout, "did not finish"}
	if !boxFailed(hung) || !boxFailed(ErrBoxCrashed) || boxFailed(timedOut) || boxFailed(nil) {
		t.Error("Main must rerun hung and crashed boxes, and only those")
	}
	if errors.Is(hung, ErrTimeout) || !errors.Is(timedOut, ErrTimeout) {
		t.Error("a report matches its own sentinel only")
	}
}

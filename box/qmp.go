package box

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The harness speaks QMP, QEMU's machine protocol, to the box's QEMU over
// a Unix socket. When a box shows no sign of life, its kernel cannot say
// what it was doing, but QEMU can: where each vCPU stopped and whether it
// sits in HLT. With the box kernel's symbols that is a function name, the
// first thing to know about a hang. Tests also use it to freeze a box
// (stop), which is exactly the silence the watchdog is for.

// qmpTimeout bounds each monitor request: a QEMU that is itself stuck (or
// stopped with SIGSTOP) must not hang the harness that reports on it.
const qmpTimeout = 5 * time.Second

// qmp is a connected, negotiated QMP session. Requests are serialised;
// after an I/O error (a timeout included) the session is dead.
type qmp struct {
	mu      sync.Mutex
	conn    net.Conn
	dec     *json.Decoder
	timeout time.Duration // per request; qmpTimeout
	err     error         // the error that ended the session
}

// newQMP reads QEMU's greeting on conn and leaves capabilities
// negotiation mode, after which commands can be executed.
func newQMP(conn net.Conn) (*qmp, error) {
	q := &qmp{conn: conn, dec: json.NewDecoder(conn), timeout: qmpTimeout}
	conn.SetDeadline(time.Now().Add(q.timeout))
	var greeting map[string]json.RawMessage
	if err := q.dec.Decode(&greeting); err != nil {
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if _, ok := greeting["QMP"]; !ok {
		return nil, errors.New("qmp: no greeting")
	}
	if _, err := q.execute("qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return q, nil
}

// execute runs one QMP command and returns its "return" value, skipping
// the asynchronous events QEMU may send in between.
func (q *qmp) execute(command string, args any) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return nil, q.err
	}
	q.conn.SetDeadline(time.Now().Add(q.timeout))
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	if err := json.NewEncoder(q.conn).Encode(req); err != nil {
		q.err = fmt.Errorf("qmp %s: %w", command, err)
		return nil, q.err
	}
	for {
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := q.dec.Decode(&resp); err != nil {
			q.err = fmt.Errorf("qmp %s: %w", command, err)
			return nil, q.err
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, fmt.Errorf("qmp %s: %s", command, resp.Error.Desc)
		}
		return resp.Return, nil
	}
}

// hmp runs a human monitor command (QMP has no "info registers") and
// returns its text.
func (q *qmp) hmp(commandLine string) (string, error) {
	raw, err := q.execute("human-monitor-command", map[string]string{"command-line": commandLine})
	if err != nil {
		return "", err
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("qmp %q: %w", commandLine, err)
	}
	return out, nil
}

// status is QEMU's run state of the box ("running", "paused", ...).
func (q *qmp) status() (string, error) {
	raw, err := q.execute("query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("qmp query-status: %w", err)
	}
	return st.Status, nil
}

// vcpus reads where the box's vCPUs are and what their local APICs hold.
func (q *qmp) vcpus() ([]vcpu, error) {
	regs, err := q.hmp("info registers -a")
	if err != nil {
		return nil, err
	}
	cpus := parseRegisters(regs)
	for i := range cpus {
		// QEMU numbers a microvm's APICs as its CPUs.
		if dump, err := q.hmp(fmt.Sprintf("info lapic %d", cpus[i].n)); err == nil {
			cpus[i].apic, cpus[i].apicRead = parseAPIC(dump), true
		}
	}
	return cpus, nil
}

// vcpu is one vCPU's position as QEMU's register dump shows it.
type vcpu struct {
	n        int
	rip      uint64
	cpl      int
	halted   bool
	intsOn   bool      // RFLAGS.IF: the vCPU takes interrupts
	legacy   bool      // not in 64-bit mode (an AP the kernel has not started shows EIP=fff0)
	apic     apicState // its local APIC, if read
	apicRead bool
}

// apicState is what QEMU's `info lapic` says of a local APIC's interrupts:
// the vectors in service (ISR) and requested (IRR), and the task and
// processor priorities. They tell where a box vCPU's wake-up went (the
// box's known hang). A vector in IRR above the processor priority that
// stays there while the vCPU could take it is an interrupt the APIC holds
// for the vCPU and QEMU never delivered (wakeup.go); a vector in ISR
// the kernel never ended was taken from the APIC but never reached its
// handler, and blocks its priority class from then on.
type apicState struct {
	isr, irr []int // vectors, lowest first, as QEMU lists them
	tpr, ppr int
}

// parseAPIC reads an APIC's interrupts and priorities out of `info lapic`.
func parseAPIC(dump string) apicState {
	var a apicState
	vectors := func(f []string) []int {
		var v []int
		for _, s := range f {
			// "34(level)" for a level-triggered vector; "(none)".
			if n, err := strconv.Atoi(strings.TrimSuffix(s, "(level)")); err == nil {
				v = append(v, n)
			}
		}
		return v
	}
	for _, line := range strings.Split(dump, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "ISR": // ISR\t 236 (or "(none)")
			a.isr = vectors(f[1:])
		case "IRR":
			a.irr = vectors(f[1:])
		case "APR": // APR 0x00 TPR 0x00 DFR 0x0f LDR 0x01 PPR 0x00
			for i := 0; i+1 < len(f); i += 2 {
				n, err := strconv.ParseUint(f[i+1], 0, 8)
				switch {
				case err != nil:
				case f[i] == "TPR":
					a.tpr = int(n)
				case f[i] == "PPR":
					a.ppr = int(n)
				}
			}
		}
	}
	return a
}

// pending returns the highest vector the APIC requests that its processor
// priority lets through (a higher priority class than PPR's), or false.
func (a apicState) pending() (int, bool) {
	if len(a.irr) == 0 {
		return 0, false
	}
	v := slices.Max(a.irr)
	return v, v>>4 > a.ppr>>4
}

// String is the APIC state for a report: "ISR (none), IRR 236, TPR 0x10,
// PPR 0x10".
func (a apicState) String() string {
	list := func(v []int) string {
		if len(v) == 0 {
			return "(none)"
		}
		s := make([]string, len(v))
		for i, n := range v {
			s[i] = strconv.Itoa(n)
		}
		return strings.Join(s, " ")
	}
	return fmt.Sprintf("ISR %s, IRR %s, TPR 0x%02x, PPR 0x%02x", list(a.isr), list(a.irr), a.tpr, a.ppr)
}

var (
	cpuHeader = regexp.MustCompile(`(?m)^CPU#(\d+)`)
	ripField  = regexp.MustCompile(`([RE])IP=([0-9a-fA-F]+)`)
	cplField  = regexp.MustCompile(`CPL=(\d)`)
	hltField  = regexp.MustCompile(`HLT=(\d)`)
	flagField = regexp.MustCompile(`[RE]FL=([0-9a-fA-F]+)`)
)

// parseRegisters reads the vCPUs out of `info registers -a`.
func parseRegisters(dump string) []vcpu {
	var out []vcpu
	heads := cpuHeader.FindAllStringSubmatchIndex(dump, -1)
	for i, h := range heads {
		end := len(dump)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		block := dump[h[1]:end]
		n, _ := strconv.Atoi(dump[h[2]:h[3]])
		c := vcpu{n: n, cpl: -1}
		m := ripField.FindStringSubmatch(block)
		if m == nil {
			continue // a machine that has not started has no registers yet
		}
		c.rip, _ = strconv.ParseUint(m[2], 16, 64)
		c.legacy = m[1] == "E"
		if m := cplField.FindStringSubmatch(block); m != nil {
			c.cpl, _ = strconv.Atoi(m[1])
		}
		if m := hltField.FindStringSubmatch(block); m != nil {
			c.halted = m[1] == "1"
		}
		if m := flagField.FindStringSubmatch(block); m != nil {
			flags, _ := strconv.ParseUint(m[1], 16, 64)
			c.intsOn = flags&(1<<9) != 0 // IF
		}
		out = append(out, c)
	}
	return out
}

// symbols maps addresses of the box kernel to function names.
type symbols struct {
	addrs []uint64
	names []string
}

// loadSymbols reads the function symbols of the (unrandomised) box
// kernel's vmlinux.
func loadSymbols(vmlinux string) (*symbols, error) {
	f, err := elf.Open(vmlinux)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	type sym struct {
		addr uint64
		fn   bool
		name string
	}
	var list []sym
	for _, s := range syms {
		t := elf.ST_TYPE(s.Info)
		if (t == elf.STT_FUNC || t == elf.STT_NOTYPE) && s.Section != elf.SHN_UNDEF && s.Value != 0 && s.Name != "" {
			list = append(list, sym{s.Value, t == elf.STT_FUNC, s.Name})
		}
	}
	// A function wins over a section marker (__cpuidle_text_start) at
	// its address: name looks up the last symbol at or below an address.
	sort.Slice(list, func(i, j int) bool {
		if list[i].addr != list[j].addr {
			return list[i].addr < list[j].addr
		}
		return !list[i].fn && list[j].fn
	})
	st := &symbols{}
	for _, s := range list {
		st.addrs = append(st.addrs, s.addr)
		st.names = append(st.names, s.name)
	}
	return st, nil
}

// name returns "function+0xoff" for addr, or "" outside the kernel's
// symbols (user space, or a nested guest running on that vCPU).
func (s *symbols) name(addr uint64) string {
	if s == nil || len(s.addrs) == 0 || addr < s.addrs[0] || addr>>63 == 0 {
		return ""
	}
	i := sort.Search(len(s.addrs), func(i int) bool { return s.addrs[i] > addr }) - 1
	return fmt.Sprintf("%s+%#x", s.names[i], addr-s.addrs[i])
}

// describeVCPUs says where each of the box's vCPUs is, for a report, with
// names from the box kernel's symbols and, where smol's guest kernel has
// one at the same address, its name too: QEMU shows a vCPU running a
// nested guest at the guest's RIP, and both kernels live in the same
// upper half (CI's hung boxes showed "tcp_v6_connect+0x3c6" in the box
// kernel, which was queued_spin_lock_slowpath in the guest's).
func describeVCPUs(cpus []vcpu, syms, guestSyms *symbols) string {
	var b strings.Builder
	for _, c := range cpus {
		fmt.Fprintf(&b, "\n    CPU %d: RIP %#x", c.n, c.rip)
		switch name := syms.name(c.rip); {
		case c.legacy:
			b.WriteString(" (not in 64-bit mode: not started by the box kernel yet?)")
		case name != "":
			fmt.Fprintf(&b, " %s", name)
			if g := guestSyms.name(c.rip); g != "" {
				fmt.Fprintf(&b, " (or, in a nested guest on smol's kernel, %s)", g)
			}
		case c.cpl == 3:
			b.WriteString(" (user space)")
		default:
			b.WriteString(" (not in the box kernel: a nested guest?)")
		}
		if c.halted {
			b.WriteString(", halted (waiting for an interrupt)")
		}
		if !c.intsOn && !c.legacy {
			b.WriteString(", interrupts off")
		}
		if c.apicRead {
			fmt.Fprintf(&b, "; local APIC: %s", c.apic)
		}
	}
	return b.String()
}

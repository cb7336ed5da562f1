package box

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Lost wake-ups.
//
// QEMU 7.2's software CPU can lose the note that tells a vCPU an interrupt
// is pending (CPU_INTERRUPT_HARD in its interrupt_request). The box's
// vCPUs run nested guests through QEMU's SVM emulation, and its VMRUN
// (helper_vmrun) sets a bit in interrupt_request without the lock that
// the I/O thread holds when it raises an interrupt, so a bit set in
// between is overwritten. The interrupt itself stays requested in the
// local APIC (IRR); but the vCPU, which looks at its APIC only when
// told, waits for a note that never comes: halted, or spinning in a loop
// that only an interrupt ends. When it was the vCPU's timer, nothing else
// comes either, and a box whose every vCPU waits so is hung for good:
// BENCHMARKS.md, "A one-vCPU box hangs instead", caught that state in its
// hang reports.
//
// Any new interrupt makes QEMU look at the APIC again and deliver its
// highest requested vector, the lost one included. So while the box's
// heartbeat is late, the harness looks for the state: a vCPU, halted with
// interrupts enabled or running, while its APIC requests a vector above
// its processor priority. Seen on the same vCPU with the same vector in
// two looks wakeLookPeriod apart (one look is not atomic: an interrupt may
// arrive between the register and the APIC reads), it writes a line to
// the life port, whose virtio-serial interrupt is such a new interrupt,
// and says so on stderr. The state does not last otherwise: QEMU delivers
// an interrupt the vCPU can take within microseconds of its request (a
// halted vCPU wakes, a running one takes it after its current block of
// code). A vCPU in a nested guest shows the guest's registers, but the
// box kernel enters the guest with its own interrupts on (sti; vmrun), so
// an interrupt for the box kernel ends the guest's run at once whatever
// the guest's flags say: CI lost a box whose vCPU spun 120 s in a nested
// guest with the guest's interrupts off and the timer's vector requested.
// A box-kernel vCPU that runs with interrupts off for seconds is stuck
// anyway; the wake-up it gets changes nothing, and its line says which
// of the two it may be. A wake-up that does not help leaves the box to
// its watchdog, as before.

const (
	// wakeLookAfter is how long the box may go without a sign of life
	// before the harness looks for a lost wake-up: a beat and a
	// quarter, so that a box on time costs no monitor requests, and one
	// whose timer was lost stands still for about a beat. Everything in
	// the box waits while it stands still, and the time it lost comes
	// back at once when it wakes: a timeout of 2 s in a guest or a VMM
	// there (Linux's vsock connect, smol's vsock timers) can expire in
	// the stall, and the first harness's stalls lasted four to six
	// seconds.
	wakeLookAfter = beatPeriod + beatPeriod/4

	// wakeLookPeriod is how often it looks while the heartbeat is late.
	// QEMU delivers an interrupt a vCPU can take within microseconds,
	// so the same state seen twice this far apart is not one in passing.
	wakeLookPeriod = 250 * time.Millisecond
)

// lostWakeup is a vCPU seen taking interrupts, halted or not, with a
// vector its APIC would let through requested and not delivered.
type lostWakeup struct {
	vcpu
	vector int
}

// findLostWakeups returns the vCPUs in cpus that wait for an interrupt
// their APIC holds for them.
func findLostWakeups(cpus []vcpu) []lostWakeup {
	var out []lostWakeup
	for _, c := range cpus {
		// Halted with interrupts off, a vCPU waits for nothing an
		// interrupt could end (cli; hlt).
		if c.legacy || !c.apicRead || c.halted && !c.intsOn {
			continue
		}
		if v, ok := c.apic.pending(); ok {
			out = append(out, lostWakeup{c, v})
		}
	}
	return out
}

// wakeups is the harness's watch for lost wake-ups in one box.
type wakeups struct {
	suspects []lostWakeup // what the last look found
	done     int          // wake-ups sent
}

// confirmed returns the lost wake-ups of found that the previous look had
// also seen (same vCPU, same vector), and remembers found for the next.
func (w *wakeups) confirmed(found []lostWakeup) []lostWakeup {
	var out []lostWakeup
	for _, f := range found {
		for _, s := range w.suspects {
			if s.n == f.n && s.vector == f.vector {
				out = append(out, f)
				break
			}
		}
	}
	w.suspects = found
	return out
}

// checkWakeups looks for lost wake-ups in a box whose heartbeat is late
// and wakes its vCPUs when it finds one confirmed. The watch calls it
// every wakeLookPeriod.
func (b *session) checkWakeups(now time.Time) {
	if now.Sub(b.life.lastSign()) < wakeLookAfter {
		b.wake.suspects = nil
		return
	}
	b.mu.Lock()
	q := b.monitor
	b.mu.Unlock()
	if q == nil {
		return
	}
	if status, err := q.status(); err != nil || status != "running" {
		b.wake.suspects = nil // a stopped box's vCPUs do not run at all
		return
	}
	cpus, err := q.vcpus()
	if err != nil {
		return
	}
	lost := b.wake.confirmed(findLostWakeups(cpus))
	if len(lost) == 0 {
		return
	}
	b.wake.suspects = nil
	var what []string
	for _, l := range lost {
		how := "running with interrupts on"
		switch {
		case l.halted:
			how = "halted with interrupts on"
		case !l.intsOn:
			how = "running with interrupts off, a nested guest's flags or a stuck box kernel's"
		}
		what = append(what, fmt.Sprintf("vCPU %d, %s, waits for vector %d that its APIC holds (%v)", l.n, how, l.vector, l.apic))
	}
	if err := b.tellInit("wake"); err != nil { // the box's init reads and ignores it
		fmt.Fprintf(os.Stderr, "box: %s, an interrupt QEMU lost; cannot wake the box: %v\n", strings.Join(what, "; "), err)
		return
	}
	b.wake.done++
	fmt.Fprintf(os.Stderr, "box: %s, an interrupt QEMU lost (box/wakeup.go); woke the box, silent for %.1f s, with an interrupt from its life port (wake-up %d of this box)\n",
		strings.Join(what, "; "), now.Sub(b.life.lastSign()).Seconds(), b.wake.done)
}

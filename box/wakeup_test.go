package box

import (
	"reflect"
	"testing"
)

// lapicDump is QEMU 7.2's `info lapic` for a vCPU, shortened, with the
// given interrupt lines.
func lapicDump(isr, irr, priorities string) string {
	return "dumping local APIC state for CPU 0\n\nLVT0\t 0x00010700 active-hi edge  masked                      ExtINT (vec 0)\n" +
		"ESR\t 0x00000000\nISR\t " + isr + "\nIRR\t " + irr + "\n\n" + priorities + "\n"
}

func TestFindLostWakeups(t *testing.T) {
	// What both caught hangs showed: the timer's vector requested,
	// nothing in service, the priority below it.
	hung := parseAPIC(lapicDump("(none)", "236 ", "APR 0x00 TPR 0x10 DFR 0x0f LDR 0x01 PPR 0x10"))
	if got := hung.String(); got != "ISR (none), IRR 236, TPR 0x10, PPR 0x10" {
		t.Errorf("String = %q", got)
	}
	level := parseAPIC(lapicDump("(none)", "34(level) ", "APR 0x00 TPR 0x00 DFR 0x0f LDR 0x01 PPR 0x00"))
	if !reflect.DeepEqual(level.irr, []int{34}) {
		t.Errorf("a level-triggered vector parsed as %v, want [34]", level.irr)
	}
	// In service at 236: PPR is 0xe0, and 236 (class 0xe) waits for
	// the kernel's EOI, as it should.
	blocked := parseAPIC(lapicDump("236 ", "236 ", "APR 0x00 TPR 0x00 DFR 0x0f LDR 0x01 PPR 0xe0"))
	idle := parseAPIC(lapicDump("(none)", "(none)", "APR 0x00 TPR 0x00 DFR 0x0f LDR 0x01 PPR 0x00"))

	cpus := []vcpu{
		{n: 0, halted: true, intsOn: true, apic: hung, apicRead: true},    // lost
		{n: 1, halted: false, intsOn: true, apic: hung, apicRead: true},   // lost while running (spinning for a timer)
		{n: 2, halted: true, intsOn: false, apic: hung, apicRead: true},   // cli; hlt: no interrupt wakes it
		{n: 3, halted: true, intsOn: true, apic: blocked, apicRead: true}, // masked by the priority
		{n: 4, halted: true, intsOn: true, apic: idle, apicRead: true},    // nothing requested
		{n: 5, halted: true, intsOn: true, apic: hung, apicRead: false},   // APIC unread
		{n: 6, halted: true, intsOn: true, apic: level, apicRead: true},   // lost, level-triggered
		// An AP the box kernel has not started yet.
		{n: 7, halted: true, intsOn: true, legacy: true, apic: hung, apicRead: true},
		// Running with interrupts off: a nested guest's flags (CI lost a
		// box so), which do not hold off the box kernel's interrupts.
		{n: 8, halted: false, intsOn: false, apic: hung, apicRead: true},
	}
	got := findLostWakeups(cpus)
	want := []lostWakeup{{cpus[0], 236}, {cpus[1], 236}, {cpus[6], 34}, {cpus[8], 236}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("findLostWakeups = %+v, want %+v", got, want)
	}
}

// TestWakeupsConfirmed checks that one look is never enough: a lost
// wake-up is acted on only when the next look finds the same vCPU waiting
// for the same vector.
func TestWakeupsConfirmed(t *testing.T) {
	var w wakeups
	a := lostWakeup{vcpu{n: 0}, 236}
	if got := w.confirmed([]lostWakeup{a}); len(got) != 0 {
		t.Fatalf("the first look confirmed %v", got)
	}
	if got := w.confirmed([]lostWakeup{{vcpu{n: 0}, 253}}); len(got) != 0 {
		t.Fatalf("a different vector confirmed %v", got)
	}
	if got := w.confirmed([]lostWakeup{{vcpu{n: 1}, 253}}); len(got) != 0 {
		t.Fatalf("a different vCPU confirmed %v", got)
	}
	if got := w.confirmed(nil); len(got) != 0 {
		t.Fatalf("an empty look confirmed %v", got)
	}
	w.confirmed([]lostWakeup{a})
	if got := w.confirmed([]lostWakeup{a}); !reflect.DeepEqual(got, []lostWakeup{a}) {
		t.Fatalf("two looks in a row confirmed %v, want %v", got, []lostWakeup{a})
	}
}

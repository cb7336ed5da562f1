package main

import (
	"strings"
	"testing"
)

func TestLineCounterCountsFloodLinesAcrossWrites(t *testing.T) {
	var c lineCounter
	console := "[    0.5] kernel line\r\nflood 0 abc\r\nflood 1 abc\nflood 2 ab" + "smol: guest crashed\n"
	for _, chunk := range strings.SplitAfter(console, "b") { // lines cut across writes
		c.Write([]byte(chunk))
	}
	if c.flood() != 3 || c.done() {
		t.Fatalf("flood %d, done %v; want 3 lines (the cut one counts once) and not done", c.flood(), c.done())
	}
	c.Write([]byte("flood 3 abc\n" + doneLine + "\r\n"))
	if c.flood() != 4 || !c.done() {
		t.Errorf("flood %d, done %v; want 4 and done", c.flood(), c.done())
	}
}

func TestFloodRCWritesTheLastLine(t *testing.T) {
	rc := floodRC(7)
	for _, want := range []string{"-lt 7 ]", "echo " + doneLine, "poweroff -f"} {
		if !strings.Contains(rc, want) {
			t.Errorf("rc lacks %q:\n%s", want, rc)
		}
	}
}

package memory

import (
	"bytes"
	"errors"
	"testing"
)

func TestLayoutSplitsAroundHole(t *testing.T) {
	small := Layout(512 << 20)
	if len(small) != 1 || small[0].Size != 512<<20 {
		t.Fatalf("512 MiB layout = %+v", small)
	}
	big := Layout(8 << 30)
	if len(big) != 2 {
		t.Fatalf("8 GiB layout = %+v", big)
	}
	if big[0].End() != MMIOHoleStart || big[1].GuestAddr != MMIOHoleEnd || big[1].HostOffset != MMIOHoleStart {
		t.Fatalf("8 GiB layout = %+v", big)
	}
	if big[0].Size+big[1].Size != 8<<30 {
		t.Fatalf("sizes add to %d", big[0].Size+big[1].Size)
	}
}

func TestAccessAboveHoleUsesSecondRegion(t *testing.T) {
	g, err := New(MMIOHoleStart + 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.WriteAt([]byte("high"), int64(MMIOHoleEnd)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.Bytes()[MMIOHoleStart:MMIOHoleStart+4], []byte("high")) {
		t.Fatal("write above 4 GiB did not land right after low RAM in the memfd")
	}
	got := make([]byte, 4)
	if _, err := g.ReadAt(got, int64(MMIOHoleEnd)); err != nil || string(got) != "high" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

func TestOutOfRangeAccessesFail(t *testing.T) {
	g, err := New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cases := []struct{ addr, length uint64 }{
		{1 << 20, 1},          // just past the end
		{1<<20 - 1, 2},        // straddles the end
		{0, 1<<20 + 1},        // too long
		{^uint64(0), 2},       // wraps
		{^uint64(0) - 10, 20}, // wraps
		{MMIOHoleStart, 1},    // in the hole
		{MMIOHoleEnd, 1},      // above 4 GiB with no high RAM
	}
	for _, c := range cases {
		if _, err := g.Slice(c.addr, c.length); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Slice(%#x, %#x) error = %v, want ErrOutOfRange", c.addr, c.length, err)
		}
	}
	if s, err := g.Slice(1<<20, 0); err != nil || len(s) != 0 {
		t.Errorf("empty slice at end: %v", err)
	}
	if _, err := g.ReadAt(make([]byte, 1), -1); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("negative ReadAt: %v", err)
	}
}

func TestNewRejectsBadSizes(t *testing.T) {
	for _, size := range []uint64{0, 4095, 4097} {
		if g, err := New(size); err == nil {
			g.Close()
			t.Errorf("New(%d) succeeded", size)
		}
	}
}

func FuzzSlice(f *testing.F) {
	g, err := New(MMIOHoleStart + 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	defer g.Close()
	f.Add(uint64(0), uint64(16))
	f.Add(MMIOHoleStart-8, uint64(16))
	f.Add(MMIOHoleEnd+(1<<20)-1, uint64(1))
	f.Fuzz(func(t *testing.T, addr, length uint64) {
		s, err := g.Slice(addr, length)
		if err != nil {
			return
		}
		if uint64(len(s)) != length {
			t.Fatalf("len %d, want %d", len(s), length)
		}
		end := addr + length
		inLow := end >= addr && end <= MMIOHoleStart
		inHigh := addr >= MMIOHoleEnd && end >= addr && end <= MMIOHoleEnd+(1<<20)
		if !inLow && !inHigh {
			t.Fatalf("Slice(%#x, %#x) accepted an access outside RAM", addr, length)
		}
	})
}

package ext4fs

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestBitmapSetRange: the byte-wise setRange sets exactly the bits that
// setting them one by one does, across byte boundaries and empty ranges.
func TestBitmapSetRange(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 2000; round++ {
		got, want := make(bitmap, 16), make(bitmap, 16)
		from, to := uint32(r.Intn(129)), uint32(r.Intn(129))
		got.setRange(from, to)
		for i := from; i < to; i++ {
			want.set(i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("setRange(%d, %d) = %08b, want %08b", from, to, got, want)
		}
	}
}

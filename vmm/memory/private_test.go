package memory

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestPrivateMappingOfAFile(t *testing.T) {
	const size = 64 * PageSize
	p := filepath.Join(t.TempDir(), "ram")
	base := make([]byte, PageSize+size)
	copy(base[PageSize:], "page zero")
	copy(base[PageSize+5*PageSize:], "page five")
	if err := os.WriteFile(p, base, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p) // read-only: the guest's writes must never reach it
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := NewPrivate(f, PageSize, size+PageSize); err == nil {
		t.Fatal("a file shorter than the RAM was mapped")
	}
	g, err := NewPrivate(f, PageSize, size)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	b, _ := g.Slice(0, 9)
	if string(b) != "page zero" {
		t.Fatalf("page 0 reads %q", b)
	}
	copy(b, "GUEST")
	if onDisk, _ := os.ReadFile(p); !bytes.Equal(onDisk, base) {
		t.Fatal("a guest write reached the file")
	}
	// A discarded page reads as zeros, not as the file's contents.
	if err := g.Discard(5*PageSize, PageSize); err != nil {
		t.Fatal(err)
	}
	five, _ := g.Slice(5*PageSize, PageSize)
	if !bytes.Equal(five, make([]byte, PageSize)) {
		t.Fatalf("a discarded page reads %q", five[:16])
	}
	if zero, _ := g.Slice(0, 5); string(zero) != "GUEST" {
		t.Fatalf("the discard touched another page: %q", zero)
	}
}

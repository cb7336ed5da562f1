package guestbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func testAsset(t *testing.T, content []byte) asset {
	t.Helper()
	enc, _ := zstd.NewWriter(nil)
	s := sha256.Sum256(content)
	return asset{name: "vmlinux", compressed: enc.EncodeAll(content, nil), sum: hex.EncodeToString(s[:])}
}

func TestExtractOnceAndCheckTheDigest(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte("kernel"), 100000)
	a := testAsset(t, content)
	p, err := extract(a, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, content) || !strings.Contains(filepath.Base(p), a.sum[:16]) {
		t.Fatalf("extracted %s: %d bytes", p, len(got))
	}
	again, err := extract(a, dir)
	if err != nil || again != p {
		t.Fatalf("second extract: %s, %v", again, err)
	}
	bad := a
	bad.sum = strings.Repeat("0", 64)
	if _, err := extract(bad, dir); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a wrong digest: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left in the cache: %v", entries)
	}
	if _, err := (asset{name: "vmlinux"}).path(); err != ErrNotEmbedded {
		t.Errorf("an empty asset: %v", err)
	}
}

package imagefs

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// benchImage writes a ~100 MiB image of mixed content to an OCI layout:
// many small text files, some large random (incompressible) files, some
// large compressible ones, symlinks and hardlinks, across four layers.
func benchImage(b *testing.B) (string, int64) {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	words := strings.Fields("the quick brown fox jumps over a lazy dog while smol boots tiny micro vms in milliseconds")
	text := func(n int) string {
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteString(words[r.IntN(len(words))])
			sb.WriteByte(' ')
		}
		return sb.String()[:n]
	}
	random := func(n int) string {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return string(p)
	}
	var total int64
	var layers [][]ent
	var l []ent
	for i := 0; i < 1500; i++ { // ~27 MiB of small text files in 50 dirs
		n := 4096 + r.IntN(32768)
		total += int64(n)
		l = append(l, ent{Name: fmt.Sprintf("usr/share/d%02d/f%04d.txt", i%50, i), Body: text(n), Mode: 0o644})
	}
	layers = append(layers, l)
	l = nil
	for i := 0; i < 30; i++ { // 30 MiB incompressible
		total += 1 << 20
		l = append(l, ent{Name: fmt.Sprintf("usr/lib/blob%02d.so", i), Body: random(1 << 20), Mode: 0o755})
	}
	layers = append(layers, l)
	l = nil
	for i := 0; i < 10; i++ { // 30 MiB compressible
		total += 3 << 20
		l = append(l, ent{Name: fmt.Sprintf("var/data/big%02d.dat", i), Body: text(3 << 20), Mode: 0o644})
	}
	layers = append(layers, l)
	l = nil
	for i := 0; i < 500; i++ { // 16 MiB more, with links
		total += 32 << 10
		p := fmt.Sprintf("opt/app/m%03d", i)
		l = append(l, ent{Name: p, Body: text(32 << 10), Mode: 0o644, UID: 1000, GID: 1000},
			symlink(p+".sym", "m"+fmt.Sprint(i)), hardlink(p+".hl", p))
	}
	layers = append(layers, l)

	img := v1.Image(empty.Image)
	for _, ents := range layers {
		data := tarBytes(b, ents...)
		lay, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
			tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			b.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, lay); err != nil {
			b.Fatal(err)
		}
	}
	dir := filepath.Join(b.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		b.Fatal(err)
	}
	return dir, total
}

// BenchmarkUnpack100MiB times a cold Get of a ~100 MiB image from an OCI
// layout: verify + decompress + apply all layers into the ext4 image.
func BenchmarkUnpack100MiB(b *testing.B) {
	src, total := benchImage(b)
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		home := b.TempDir()
		s := openStore(b, home)
		b.StartTimer()
		img, err := s.Get(context.Background(), src, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if i == 0 {
			b.ReportMetric(float64(img.Size)/(1<<20), "ext4-MiB")
		}
		os.RemoveAll(home)
		b.StartTimer()
	}
}

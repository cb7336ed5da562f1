// Package benchimage writes the images benchmarks run.
package benchimage

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol/internal/imagetest"
)

// Busybox writes an image of the host's static busybox (sh, cat, true
// and the rest through it), /root and /tmp, as a docker-save tarball.
func Busybox(out string) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("static busybox: %w", err)
	}
	bin := imagetest.File("bin/busybox", string(bb))
	bin.Mode = 0o755
	entries := []imagetest.Entry{imagetest.Dir("bin/"), bin, imagetest.Dir("root/"), imagetest.Dir("tmp/")}
	for _, a := range []string{"sh", "cat", "true"} {
		entries = append(entries, imagetest.Symlink("bin/"+a, "busybox"))
	}
	l, err := imagetest.Layer(entries...)
	if err != nil {
		return err
	}
	img, err := imagetest.Image("amd64", v1.Config{Env: []string{"PATH=/bin"}}, l)
	if err != nil {
		return err
	}
	tag, _ := name.NewTag("bench/busybox:1")
	return tarball.WriteToFile(out, tag, img)
}

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
// and the rest through it), /root and /tmp, as a docker-save tarball
// tagged bench/busybox:1.
func Busybox(out string) error { return BusyboxAs(out, "bench/busybox:1", nil) }

// BusyboxAs is Busybox tagged ref, with an ENTRYPOINT.
func BusyboxAs(out, ref string, entrypoint []string) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("static busybox: %w", err)
	}
	bin := imagetest.File("bin/busybox", string(bb))
	bin.Mode = 0o755
	entries := []imagetest.Entry{imagetest.Dir("bin/"), bin, imagetest.Dir("root/"), imagetest.Dir("tmp/")}
	for _, a := range []string{"sh", "cat", "true", "sleep"} {
		entries = append(entries, imagetest.Symlink("bin/"+a, "busybox"))
	}
	l, err := imagetest.Layer(entries...)
	if err != nil {
		return err
	}
	img, err := imagetest.Image("amd64", v1.Config{Env: []string{"PATH=/bin"}, Entrypoint: entrypoint}, l)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}

package integration

import (
	"os"
	"sync"
	"testing"

	"github.com/smolvm/smol/box"
	"github.com/smolvm/smol/internal/debimage"
)

// debianImage is a Debian test image (package internal/debimage) for one
// test. The host builds it before box.Main moves the tests into the box
// (the box has no network, and debootstrap under its software CPU would
// take many minutes), only for a test binary that will run test, and
// tells the box where it is, or why there is none, through the
// environment the box's command inherits. A first build (one to several
// minutes, more on a loaded machine) counts against go test's -timeout: it
// fits make test's, not always the default 10m.
type debianImage struct {
	test string // the top-level test that uses it
	env  string // its path in the box's environment; env+"_ERROR" the failure
	// image returns what to build (it may build files for it first).
	image func() (debimage.Image, error)

	once sync.Once
	out  string
	err  error
}

// prepare builds the image on the host, before the box, when this test
// binary will run the image's test.
func (d *debianImage) prepare() {
	if box.InBox() || !testSelected(d.test) {
		return
	}
	os.Unsetenv(d.env)
	os.Unsetenv(d.env + "_ERROR")
	p, err := d.build()
	if err != nil {
		os.Setenv(d.env+"_ERROR", err.Error())
		return
	}
	os.Setenv(d.env, p)
}

// path returns the image tarball for a test: the one the host built
// before the box (inside it), or built now (on a host that boots guests
// itself).
func (d *debianImage) path(t *testing.T) string {
	t.Helper()
	if !box.InBox() {
		p, err := d.build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if msg := os.Getenv(d.env + "_ERROR"); msg != "" {
		t.Fatalf("building the Debian test image on the host failed: %s", msg)
	}
	p := os.Getenv(d.env)
	if p == "" {
		t.Fatalf("the host built no Debian test image before the box (%s is unset)", d.env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the Debian test image the host built is not visible in the box: %v", err)
	}
	return p
}

func (d *debianImage) build() (string, error) {
	d.once.Do(func() {
		img, err := d.image()
		if err != nil {
			d.err = err
			return
		}
		d.out, d.err = debimage.Build(img, prefixed{os.Stderr, "integration: "})
	})
	return d.out, d.err
}

// prefixed writes each write to w after a prefix.
type prefixed struct {
	w      *os.File
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	p.w.WriteString(p.prefix)
	return p.w.Write(b)
}

// Package imagetest builds OCI images in memory, from a list of tar
// entries, for the tests and benchmarks that need real images (imagefs's
// unit tests, the integration tests' registry, bench/image).
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one member of a layer's tar stream, written as given: a zero
// Mode is mode 0000 (tests of odd permissions need it), so use the
// constructors for ordinary entries.
type Entry struct {
	Name         string
	Type         byte // tar.Type*; 0 means a regular file
	Body         string
	Link         string // symlink target or hardlink name
	Mode         int64
	UID, GID     int
	Major, Minor int64
	Xattrs       map[string]string // written as SCHILY.xattr.* PAX records
}

// Dir, File, Symlink and Hardlink are entries with the usual modes.
func Dir(name string) Entry        { return Entry{Name: name, Type: tar.TypeDir, Mode: 0o755} }
func File(name, body string) Entry { return Entry{Name: name, Body: body, Mode: 0o644} }
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Link: target, Mode: 0o777}
}
func Hardlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Link: target, Mode: 0o644}
}

// modTime is every entry's mtime, so that equal entries make equal layers.
var modTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// Tar writes entries as an uncompressed PAX tar stream.
func Tar(entries ...Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Linkname: e.Link, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			ModTime: modTime, Devmajor: e.Major, Devminor: e.Minor, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		for k, v := range e.Xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer is an image layer holding entries.
func Layer(entries ...Entry) (v1.Layer, error) {
	data, err := Tar(entries...)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// Image stacks layers into a linux/arch image whose run configuration is cfg.
func Image(arch string, cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	return mutate.ConfigFile(img, cf)
}

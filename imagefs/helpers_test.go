package imagefs

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/smolvm/smol/internal/imagetest"
)

// ent is one tar member of a test layer.
type ent = imagetest.Entry

var (
	dir      = imagetest.Dir
	file     = imagetest.File
	symlink  = imagetest.Symlink
	hardlink = imagetest.Hardlink
)

func tarBytes(t testing.TB, ents ...ent) []byte {
	t.Helper()
	b, err := imagetest.Tar(ents...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func layer(t testing.TB, ents ...ent) v1.Layer {
	t.Helper()
	l, err := imagetest.Layer(ents...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// image builds a linux/<arch> image from layers with config c.
func image(t testing.TB, arch string, c v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := imagetest.Image(arch, c, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testRegistry is an in-process registry that counts requests and can
// corrupt or truncate chosen blobs on the way out.
type testRegistry struct {
	host     string
	requests atomic.Int64
	inner    http.Handler
	mu       sync.Mutex
	mangle   map[string]string // blob digest → "flip" | "truncate"
}

func newRegistry(t testing.TB) *testRegistry {
	r := &testRegistry{inner: registry.New(registry.Logger(log.New(io.Discard, "", 0))), mangle: map[string]string{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	r.mu.Lock()
	var how string
	for d, h := range r.mangle {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/blobs/"+d) {
			how = h
		}
	}
	r.mu.Unlock()
	if how == "" {
		r.inner.ServeHTTP(w, req)
		return
	}
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	switch how {
	case "flip":
		body = append([]byte(nil), body...)
		body[len(body)/2] ^= 0xff
	case "truncate":
		body = body[:len(body)/2]
	case "cut": // promise everything, send half, drop the connection
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	w.Write(body)
}

func (r *testRegistry) push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref := r.host + "/" + repoTag
	if err := remote.Write(mustRef(t, ref), img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func (r *testRegistry) pushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref := r.host + "/" + repoTag
	if err := remote.WriteIndex(mustRef(t, ref), idx); err != nil {
		t.Fatal(err)
	}
	return ref
}

func openStore(t testing.TB, home string) *Store {
	t.Helper()
	s, err := Open(home)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t testing.TB, s *Store, ref string, o Options) *Image {
	t.Helper()
	img, err := s.Get(context.Background(), ref, o)
	if err != nil {
		t.Fatalf("Get(%s): %v", ref, err)
	}
	return img
}

// debugfs runs one read-only debugfs request against an ext4 image.
func debugfs(t testing.TB, disk, req string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command("debugfs", "-R", req, disk)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("debugfs -R %q: %v: %s", req, err, errb.String())
	}
	return out.String(), errb.String()
}

// debugfsQuote quotes a test's own path for debugfs's command parser.
func debugfsQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func catExt4(t testing.TB, disk, p string) string {
	t.Helper()
	out, _ := debugfs(t, disk, "cat "+debugfsQuote(p))
	return out
}

func existsExt4(t testing.TB, disk, p string) bool {
	t.Helper()
	_, errs := debugfs(t, disk, "stat "+debugfsQuote(p))
	return !strings.Contains(errs, "not found")
}

type ext4Stat struct {
	typ         string
	mode        uint64
	uid, gid    int
	links       int
	inode       int
	fastLinkDst string
}

var (
	statHead  = regexp.MustCompile(`Inode: (\d+)\s+Type: (\S+).*?Mode:\s+(\d+)`)
	statOwner = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+)`)
	statLinks = regexp.MustCompile(`Links: (\d+)`)
	statFast  = regexp.MustCompile(`Fast link dest: "(.*)"`)
)

func statExt4(t testing.TB, disk, p string) ext4Stat {
	t.Helper()
	out, errs := debugfs(t, disk, "stat "+debugfsQuote(p))
	m := statHead.FindStringSubmatch(out)
	o := statOwner.FindStringSubmatch(out)
	l := statLinks.FindStringSubmatch(out)
	if m == nil || o == nil || l == nil {
		t.Fatalf("stat %s: cannot parse %q %q", p, out, errs)
	}
	var s ext4Stat
	s.inode, _ = strconv.Atoi(m[1])
	s.typ = m[2]
	s.mode, _ = strconv.ParseUint(m[3], 8, 32)
	s.uid, _ = strconv.Atoi(o[1])
	s.gid, _ = strconv.Atoi(o[2])
	s.links, _ = strconv.Atoi(l[1])
	if f := statFast.FindStringSubmatch(out); f != nil {
		s.fastLinkDst = f[1]
	}
	return s
}

func nlink(t testing.TB, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Nlink
}

// tarDir writes the regular files and directories below dir to a tar file.
func tarDir(t testing.TB, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mustRef(t testing.TB, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

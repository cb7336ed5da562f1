package pack

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/smolvm/smol/internal/atomicfile"
)

// A stub is the runnable half of a pack: a copy of the smol binary with a
// trailer appended that names its pack. The kernel loads an ELF file by
// its program headers, so bytes after them change nothing about how the
// binary runs; smol reads its own executable's last bytes at start and,
// finding a trailer, behaves as the artifact's runner. With --single-file
// the pack itself sits between the binary and the trailer.
//
// Trailer layout, at the very end of the file:
//
//	JSON (Stub), then its length u32 (little-endian), then "SMOLSTUB"

var stubMagic = [8]byte{'S', 'M', 'O', 'L', 'S', 'T', 'U', 'B'}

// maxStubJSON bounds a trailer's JSON.
const maxStubJSON = 4096

const stubFormat = "smolstub/1"

// Stub is what a stub's trailer says about its pack.
type Stub struct {
	Format string `json:"format"` // "smolstub/1"
	// Sidecar is the file name, in the stub's directory, of its pack;
	// empty for a single-file stub.
	Sidecar string `json:"sidecar,omitempty"`
	// ID is the pack's Reader.ID: a sidecar with another is not this
	// stub's (repacked, or swapped).
	ID string `json:"id"`
	// Offset and Length locate a single-file stub's own pack.
	Offset int64 `json:"offset,omitempty"`
	Length int64 `json:"length,omitempty"`
}

// ErrNoStub: the file carries no stub trailer (it is a plain smol).
var ErrNoStub = errors.New("not a smol stub")

// ReadStub reads the trailer of the executable at path.
func ReadStub(path string) (*Stub, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, _, err := readStub(f, fi.Size())
	return st, err
}

// readStub reads the trailer of the size-byte file f, and where the
// runner (the smol binary proper) ends in it.
func readStub(f io.ReaderAt, size int64) (_ *Stub, runnerEnd int64, _ error) {
	var tail [12]byte
	if size < int64(len(tail)) {
		return nil, 0, ErrNoStub
	}
	if _, err := f.ReadAt(tail[:], size-int64(len(tail))); err != nil {
		return nil, 0, err
	}
	if !bytes.Equal(tail[4:], stubMagic[:]) {
		return nil, 0, ErrNoStub
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n == 0 || n > maxStubJSON || n > size-int64(len(tail)) {
		return nil, 0, fmt.Errorf("a damaged stub trailer (%d bytes of JSON)", n)
	}
	raw := make([]byte, n)
	if _, err := f.ReadAt(raw, size-int64(len(tail))-n); err != nil {
		return nil, 0, err
	}
	var s Stub
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, 0, fmt.Errorf("a damaged stub trailer: %v", err)
	}
	end := size - int64(len(tail)) - n
	switch {
	case s.Format != stubFormat:
		return nil, 0, fmt.Errorf("a stub of format %q (this smol reads %q)", s.Format, stubFormat)
	case len(s.ID) != 64:
		return nil, 0, errors.New("a stub trailer without its pack's ID")
	case s.Sidecar == "" && (s.Offset <= 0 || s.Length <= 0 || s.Offset > end || s.Length > end-s.Offset):
		return nil, 0, fmt.Errorf("a single-file stub whose pack [%d, +%d) is not inside it", s.Offset, s.Length)
	case s.Sidecar != "" && (strings.ContainsAny(s.Sidecar, "/\x00") || s.Sidecar == "." || s.Sidecar == ".."):
		return nil, 0, fmt.Errorf("a stub naming the sidecar %q", s.Sidecar)
	}
	if s.Sidecar == "" {
		return &s, s.Offset, nil
	}
	return &s, end, nil
}

// OpenStub opens the pack of the stub at exe, which ReadStub read: its own
// for a single-file stub, else its sidecar in exe's directory, which must
// be the pack it was made with.
func OpenStub(exe string, s *Stub) (*Reader, error) {
	if s.Sidecar == "" {
		f, err := os.Open(exe)
		if err != nil {
			return nil, err
		}
		r, err := OpenAt(f, s.Offset, s.Length)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", exe, err)
		}
		return r, nil
	}
	sidecar := filepath.Join(filepath.Dir(exe), s.Sidecar)
	r, err := Open(sidecar)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: its pack %s is missing (keep the two files side by side)", exe, sidecar)
	}
	if err != nil {
		return nil, err
	}
	if r.ID != s.ID {
		r.Close()
		return nil, fmt.Errorf("%s is not the pack %s was made with (pack %.12s, the stub's is %.12s): the stub and its sidecar do not match", sidecar, exe, r.ID, s.ID)
	}
	return r, nil
}

// WriteStub writes the runner exe (the smol binary) to the new file path,
// executable, with a trailer naming the pack at packPath, which it checks
// first. Single-file copies the pack into the stub; otherwise the pack
// stays the stub's sidecar, found by its base name. Like Commit, path then
// holds a whole stub or nothing, and an existing file is never replaced.
func WriteStub(path, exe, packPath string, singleFile bool) error {
	r, err := Open(packPath)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w", path, os.ErrExist)
	}
	out, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	in, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	// A stub made by a stub carries the runner only, not the old trailer.
	size := fi.Size()
	if _, end, err := readStub(in, size); err == nil {
		size = end
	}
	if _, err := io.Copy(out, io.NewSectionReader(in, 0, size)); err != nil {
		return fmt.Errorf("stub %s: %w", path, err)
	}
	s := Stub{Format: stubFormat, ID: r.ID}
	if singleFile {
		pf, err := os.Open(packPath)
		if err != nil {
			return err
		}
		defer pf.Close()
		s.Offset = size
		if s.Length, err = io.Copy(out, pf); err != nil {
			return fmt.Errorf("stub %s: %w", path, err)
		}
	} else {
		s.Sidecar = filepath.Base(packPath)
	}
	trailer, err := json.Marshal(s)
	if err != nil {
		return err
	}
	trailer = binary.LittleEndian.AppendUint32(trailer, uint32(len(trailer)))
	trailer = append(trailer, stubMagic[:]...)
	if _, err := out.Write(trailer); err != nil {
		return fmt.Errorf("stub %s: %w", path, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("stub %s: %w", path, err)
	}
	if err := os.Chmod(out.Name(), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Publish(out.Name(), path); err != nil {
		return fmt.Errorf("stub %s: %w", path, err)
	}
	return nil
}

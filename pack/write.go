package pack

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/smolvm/smol/internal/atomicfile"
)

// Writer builds a .smolmachine file: sections are compressed into a
// temporary file as they are added, and Commit writes the header and the
// manifest before them into a second temporary file that it links into
// place. The path then holds a whole pack or nothing; an existing file is
// never replaced.
type Writer struct {
	path string
	m    Manifest
	data *os.File
	end  int64
}

// Create starts a pack at path, which must not exist, for the machine m
// describes (its Sections are filled in by Add).
func Create(path string, m Manifest) (*Writer, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%s: %w", path, os.ErrExist)
	}
	data, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".data-*")
	if err != nil {
		return nil, err
	}
	m.Format, m.Sections = formatName, nil
	return &Writer{path: path, m: m, data: data}, nil
}

// Add compresses size bytes of src as section name. A src that is a
// file is read only where it has data.
func (w *Writer) Add(name string, src io.ReaderAt, size int64) error {
	if !knownSection(name) {
		return fmt.Errorf("pack: unknown section %q", name)
	}
	if _, dup := w.m.Section(name); dup {
		return fmt.Errorf("pack: section %s given twice", name)
	}
	// One thread, one level: the same input gives the same bytes.
	enc, err := zstd.NewWriter(w.data, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return err
	}
	h := sha256.New()
	if err := encode(io.MultiWriter(enc, h), src, size); err != nil {
		enc.Close()
		return fmt.Errorf("pack: section %s: %w", name, err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("pack: section %s: %w", name, err)
	}
	end, err := w.data.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	w.m.Sections = append(w.m.Sections, Section{Name: name, Offset: w.end, Length: end - w.end, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))})
	w.end = end
	return nil
}

// Commit writes the file and links it into place.
func (w *Writer) Commit() (err error) {
	defer w.Abort()
	manifest, err := json.MarshalIndent(w.m, "", "  ")
	if err != nil {
		return err
	}
	if len(manifest) > MaxManifest {
		return fmt.Errorf("pack: a manifest of %d bytes", len(manifest))
	}
	var header bytes.Buffer
	header.Write(magic[:])
	binary.Write(&header, binary.LittleEndian, [2]uint16{Major, Minor})
	binary.Write(&header, binary.LittleEndian, [2]uint32{uint32(len(manifest)), 0})

	out, err := os.CreateTemp(filepath.Dir(w.path), "."+filepath.Base(w.path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	if _, err := out.Write(append(header.Bytes(), manifest...)); err != nil {
		return fmt.Errorf("pack %s: %w", w.path, err)
	}
	if _, err := w.data.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(out, w.data); err != nil {
		return fmt.Errorf("pack %s: %w", w.path, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("pack %s: %w", w.path, err)
	}
	if err := os.Chmod(out.Name(), 0o644); err != nil {
		return err
	}
	if err := atomicfile.Publish(out.Name(), w.path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: %w", w.path, os.ErrExist)
		}
		return fmt.Errorf("pack %s: %w", w.path, err)
	}
	return nil
}

// Abort drops an unfinished pack's temporary data; after Commit it does
// nothing.
func (w *Writer) Abort() {
	if w.data != nil {
		w.data.Close()
		os.Remove(w.data.Name())
		w.data = nil
	}
}

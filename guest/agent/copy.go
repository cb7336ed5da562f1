package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/internal/tarcopy"
)

// copy runs a Copy: the tree at c.Path out as Stdout frames, or the
// Stdin frames' tree unpacked at c.Path.
func (s *session) copy(c *agent.Copy, r *agent.Reader) agent.Exit {
	if c.Out {
		if _, err := os.Lstat(c.Path); err != nil {
			return agent.Exit{Code: 1, Error: fmt.Sprintf("%s: no such file or directory", c.Path)}
		}
		if err := tarcopy.Pack(frameWriter{s.w, agent.FrameStdout}, c.Path, filepath.Base(c.Path)); err != nil {
			return agent.Exit{Code: 1, Error: err.Error()}
		}
		return agent.Exit{}
	}
	dir, rename, err := tarcopy.Target(c.Path)
	if err != nil {
		return agent.Exit{Code: 1, Error: err.Error()}
	}
	pr, pw, err := tarcopy.Pipe()
	if err != nil {
		return agent.Exit{Code: 1, Error: err.Error()}
	}
	defer pr.Close()
	ended := make(chan error, 1)
	go func() {
		defer pw.Close()
		for {
			f, err := r.Read()
			if err != nil {
				ended <- fmt.Errorf("the host ended the copy early: %w", err)
				return
			}
			switch f.Type {
			case agent.FrameStdin:
				if _, err := pw.Write(f.Payload); err != nil {
					ended <- nil // the unpack stopped reading: its error says why
					return
				}
			case agent.FrameStdinClose:
				ended <- nil
				return
			}
		}
	}()
	err = tarcopy.Unpack(pr, dir, tarcopy.Options{Rename: rename, Owners: true})
	if err == nil {
		io.Copy(io.Discard, pr) // the tar trailer, up to the host's end of stdin
	}
	pr.Close()
	if eerr := <-ended; err == nil && eerr != nil {
		err = eerr
	}
	if err != nil {
		return agent.Exit{Code: 1, Error: err.Error()}
	}
	return agent.Exit{}
}

// frameWriter sends what is written to it as frames of one type.
type frameWriter struct {
	w *agent.Writer
	t agent.FrameType
}

func (f frameWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); {
		n := min(len(p)-off, agent.MaxFrame)
		if err := f.w.Write(f.t, p[off:off+n]); err != nil {
			return off, err
		}
		off += n
	}
	return len(p), nil
}

// Command mkassets prepares the guest files that `make build` embeds in
// smol (package guestbin): each input compressed with zstd into
// DIR/NAME.zst beside DIR/NAME.sha256, the digest of the input. An asset
// whose digest is unchanged is left alone, so a rebuild does not redo it.
//
//	go run ./internal/guestbin/mkassets -o internal/guestbin/assets build/vmlinux build/agent.cpio
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

func main() {
	out := flag.String("o", "", "output directory")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: mkassets -o DIR FILE...")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	for _, in := range flag.Args() {
		if err := prepare(in, *out); err != nil {
			fatal(err)
		}
	}
}

func prepare(in, dir string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	s := sha256.Sum256(data)
	sum := hex.EncodeToString(s[:])
	name := filepath.Base(in)
	sumPath, zstPath := filepath.Join(dir, name+".sha256"), filepath.Join(dir, name+".zst")
	if old, err := os.ReadFile(sumPath); err == nil && strings.TrimSpace(string(old)) == sum {
		if _, err := os.Stat(zstPath); err == nil {
			return nil
		}
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return err
	}
	compressed := enc.EncodeAll(data, nil)
	enc.Close()
	if err := os.WriteFile(zstPath, compressed, 0o644); err != nil {
		return err
	}
	return os.WriteFile(sumPath, []byte(sum+"\n"), 0o644)
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "mkassets: %v\n", err)
	os.Exit(1)
}

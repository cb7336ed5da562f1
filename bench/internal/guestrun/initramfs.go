package guestrun

import (
	"os"
	"strings"

	"github.com/smolvm/smol/guest/initramfs"
)

// WriteInitramfs writes a temporary initramfs whose init (the binary at
// initPath, guest/init) runs rc as /etc/rc with busybox's applets, and
// returns its path; the caller removes it.
func WriteInitramfs(initPath, rc string) (string, error) {
	a := initramfs.New()
	if err := a.AddHostFile("init", initPath); err != nil {
		return "", err
	}
	if err := a.AddBusybox("/bin/busybox", initramfs.BusyboxApplets...); err != nil {
		return "", err
	}
	a.AddFile("etc/rc", []byte(rc), 0o755)
	f, err := os.CreateTemp("", "smol-bench-*.cpio")
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), a.WriteFile(f.Name())
}

// Builds is a repeatable NAME=PATH flag: more smol builds (or wrapper
// scripts) for a bench to run beside its own.
type Builds []string

func (b *Builds) String() string     { return strings.Join(*b, ",") }
func (b *Builds) Set(v string) error { *b = append(*b, v); return nil }

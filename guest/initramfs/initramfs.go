// Package initramfs builds the newc cpio archives that Linux unpacks as its
// first root filesystem: the test box's init, and the small guest
// environments that tests and the demo boot.
package initramfs

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Archive is an initramfs being assembled. Later entries with the same path
// replace earlier ones; parent directories are created as needed.
type Archive struct {
	entries map[string]cpio.Record
}

// New returns an archive holding the directories every Linux userland
// expects and /dev/console, which the kernel opens for init's stdio before
// any devtmpfs is mounted.
func New() *Archive {
	a := &Archive{entries: map[string]cpio.Record{}}
	for _, d := range []string{"bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "root", "run", "mnt"} {
		a.AddDir(d, 0o755)
	}
	a.entries["tmp"] = cpio.Directory("tmp", 0o1777)
	a.entries["dev/console"] = cpio.CharDev("dev/console", 0o600, 5, 1)
	return a
}

// AddDir adds a directory.
func (a *Archive) AddDir(name string, perm uint64) {
	name = cpio.Normalize(name)
	a.entries[name] = cpio.Directory(name, perm)
}

// AddFile adds a regular file with the given contents.
func (a *Archive) AddFile(name string, data []byte, perm uint64) {
	name = cpio.Normalize(name)
	a.entries[name] = cpio.StaticFile(name, string(data), perm)
}

// AddHostFile copies a file from the host, keeping its permission bits.
func (a *Archive) AddHostFile(name, hostPath string) error {
	data, err := os.ReadFile(hostPath)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	info, err := os.Stat(hostPath)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	a.AddFile(name, data, uint64(info.Mode().Perm()))
	return nil
}

// AddSymlink adds a symbolic link.
func (a *Archive) AddSymlink(name, target string) {
	name = cpio.Normalize(name)
	a.entries[name] = cpio.Symlink(name, target)
}

// AddBusybox adds a static busybox at /bin/busybox and a link for each applet.
func (a *Archive) AddBusybox(hostPath string, applets ...string) error {
	if err := a.AddHostFile("bin/busybox", hostPath); err != nil {
		return err
	}
	for _, applet := range applets {
		a.AddSymlink("bin/"+applet, "busybox")
	}
	return nil
}

// WriteFile writes the archive to path, replacing it atomically.
func (a *Archive) WriteFile(p string) error {
	tmp := p + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	err = a.write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("initramfs %s: %w", p, err)
	}
	return nil
}

func (a *Archive) write(f *os.File) error {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	// Sorted, so that parents come before children and output is reproducible.
	sort.Strings(names)
	records := make([]cpio.Record, 0, len(names))
	for _, n := range names {
		r := a.entries[n]
		if dir := path.Dir(n); dir != "." {
			if _, ok := a.entries[dir]; !ok {
				a.AddDir(dir, 0o755)
				records = append(records, a.entries[dir])
			}
		}
		records = append(records, r)
	}
	cpio.MakeAllReproducible(records)
	w := cpio.Newc.Writer(f)
	if err := cpio.WriteRecordsAndDirs(w, records); err != nil {
		return err
	}
	return cpio.WriteTrailer(w)
}

// BusyboxApplets is the busybox command set linked into small guest images.
var BusyboxApplets = []string{
	"sh", "ash", "cat", "echo", "ls", "mount", "umount", "mkdir", "rm", "cp", "mv", "ln",
	"poweroff", "reboot", "halt", "sleep", "uname", "nproc", "grep", "head", "tail",
	"wc", "dd", "sync", "dmesg", "free", "ps", "kill", "true", "false", "test", "[",
	"stty", "tty", "date", "env", "hostname", "id", "printf", "seq", "sed", "awk",
	"md5sum", "sha256sum", "tr", "cut", "sort", "uniq", "xargs", "find", "stat", "touch",
	"ip", "ifconfig", "nc", "mke2fs", "blockdev",
}

// AddHostBinary copies a dynamically linked host program to the same path
// in the archive, with the shared libraries and loader it needs (as ldd
// lists them), so a test guest can run a host tool such as mkfs.ext4.
func (a *Archive) AddHostBinary(hostPath string) error {
	out, err := exec.Command("ldd", hostPath).Output()
	if err != nil {
		return fmt.Errorf("initramfs: ldd %s: %w", hostPath, err)
	}
	files := []string{hostPath}
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			files = append(files, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			files = append(files, f[0])
		}
	}
	for _, f := range files {
		if err := a.AddHostFile(strings.TrimPrefix(f, "/"), f); err != nil {
			return err
		}
	}
	return nil
}

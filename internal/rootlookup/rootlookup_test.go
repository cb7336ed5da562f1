package rootlookup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testRoot makes a container root in a temporary directory from files
// (path: contents; a contents of "->TARGET" makes a symlink, "|fifo" a
// FIFO, "+x" an executable) and returns its path and a descriptor of it.
func testRoot(t *testing.T, files map[string]string) (string, int) {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(strings.TrimPrefix(content, "->"), p)
		case content == "|fifo":
			err = unix.Mkfifo(p, 0o644)
		case content == "+x":
			err = os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
		default:
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return root, fd
}

// TestLookPathInRoot: a program is found as the container would find it:
// an absolute symlink means the image's file (Debian's alternatives:
// /usr/bin/java -> /etc/alternatives/java -> /usr/lib/jvm/...), which the
// guest itself lacks; a symlink climbing out of the root stays in it;
// directories and files without an execute bit are not programs.
func TestLookPathInRoot(t *testing.T) {
	_, rootFD := testRoot(t, map[string]string{
		"usr/lib/jvm/smol-test-jdk/bin/java": "+x",
		"etc/alternatives/java":              "->/usr/lib/jvm/smol-test-jdk/bin/java",
		"usr/bin/java":                       "->/etc/alternatives/java",
		"usr/bin/climb":                      "->../../../../../../usr/bin/java",
		"usr/bin/plain":                      "not executable",
		"sbin/dir/keep":                      "",
	})
	const path = "/sbin:/usr/bin"
	for _, c := range []struct{ file, want string }{
		{"java", "/usr/bin/java"},
		{"climb", "/usr/bin/climb"}, // ../ stops at the root: the root's java
		{"/usr/bin/java", "/usr/bin/java"},
	} {
		got, err := LookPath(c.file, path, "/", rootFD)
		if err != nil || got != c.want {
			t.Errorf("LookPath(%q) = %q, %v; want %q", c.file, got, err, c.want)
		}
	}
	for _, file := range []string{"plain", "dir", "missing", "/usr/bin/plain"} {
		if got, err := LookPath(file, path, "/", rootFD); err == nil {
			t.Errorf("LookPath(%q) = %q, want an error", file, got)
		}
	}
	if _, err := os.Stat("/usr/lib/jvm/smol-test-jdk/bin/java"); err == nil {
		t.Fatal("the host has the test's file: the test cannot tell the roots apart")
	}
}

// TestLookupUserInRoot: /etc/passwd and /etc/group are the root's, through
// its own symlinks; a FIFO in their place does not hang the lookup; given
// groups are taken exactly.
func TestLookupUserInRoot(t *testing.T) {
	_, rootFD := testRoot(t, map[string]string{
		"etc/passwd.real": "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
		"etc/passwd":      "->/etc/passwd.real",
		"etc/group":       "app:x:1000:\nwheel:x:10:app\n",
	})
	u, err := LookupUser("app", nil, rootFD)
	if err != nil {
		t.Fatal(err)
	}
	if u.UID != 1000 || u.GID != 1000 || u.Home != "/home/app" || !slices.Equal(u.Groups, []uint32{1000, 10}) {
		t.Errorf("app = %+v", u)
	}
	if u, err = LookupUser("app:wheel", []uint32{7}, rootFD); err != nil || u.GID != 10 || !slices.Equal(u.Groups, []uint32{7}) {
		t.Errorf("app:wheel with groups [7] = %+v, %v", u, err)
	}

	_, fifoRoot := testRoot(t, map[string]string{"etc/passwd": "|fifo", "etc/group": "|fifo"})
	done := make(chan error, 1)
	go func() {
		u, err := LookupUser("1234:55", nil, fifoRoot)
		if err == nil && (u.UID != 1234 || u.GID != 55) {
			t.Errorf("1234:55 = %+v", u)
		}
		_, err = LookupUser("app", nil, fifoRoot)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a user named only in a FIFO was found")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lookup hung on a FIFO /etc/passwd")
	}
}

func TestNumericIDs(t *testing.T) {
	if uid, gid, ok := NumericIDs("1000:100"); !ok || uid != 1000 || gid != 100 {
		t.Errorf("1000:100 = %d, %d, %v", uid, gid, ok)
	}
	for _, spec := range []string{"1000", "app:100", "1000:wheel", "", ":", "-1:0", "4294967296:0"} {
		if _, _, ok := NumericIDs(spec); ok {
			t.Errorf("%q taken as numeric ids", spec)
		}
	}
}

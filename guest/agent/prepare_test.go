package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/smolvm/smol/agent"
	"golang.org/x/sys/unix"
)

// TestCommandUser: an OCI process's user (numeric, its groups given,
// HOME set) is taken as given; otherwise the root's /etc/passwd decides,
// HOME included.
func TestCommandUser(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("app:x:1000:1000::/home/app:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)
	u, err := commandUser(agent.Start{User: "1000:1000", Groups: []uint32{1000, 7}, Env: []string{"HOME=/srv"}}, rootFD)
	if err != nil || u.UID != 1000 || u.GID != 1000 || len(u.Groups) != 2 || u.Home != "/srv" {
		t.Errorf("given user: %+v, %v", u, err)
	}
	u, err = commandUser(agent.Start{User: "1000:1000", Groups: []uint32{1000}}, rootFD)
	if err != nil || u.Home != "/home/app" || u.Name != "app" {
		t.Errorf("without HOME: %+v, %v (want the passwd entry's home)", u, err)
	}
}

// TestPrepareTakesTheHostsPath: a program the host found is used as it
// is; one no longer there is searched for as if none had been given.
func TestPrepareTakesTheHostsPath(t *testing.T) {
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh here")
	}
	start := agent.Start{Args: []string{"sh"}, Path: sh, User: "0:0", Groups: []uint32{0}, Env: []string{"HOME=/", "PATH=/bin"}}
	proc, err := prepare(start)
	if err != nil || proc.cmd.Path != sh {
		t.Fatalf("with the host's path: %v, program %v", err, proc)
	}
	proc.release()
	start.Path = "/no/such/program"
	proc, err = prepare(start)
	if err != nil || proc.cmd.Path != "/bin/sh" {
		t.Fatalf("with a stale path: %v, program %v", err, proc)
	}
	proc.release()
}

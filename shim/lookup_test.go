package shim

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// TestLookUpOnTheHost: the shim finds a container's program and HOME in
// its root as the guest would (the root's PATH entries and symlinks, its
// /etc/passwd), leaves what it cannot find to the guest, and never finds
// the host's own files through the root's symlinks.
func TestLookUpOnTheHost(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"etc/passwd":       "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
		"usr/local/bin/hi": "#!/bin/sh\n",
		"bin/busybox":      "#!/bin/sh\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("busybox", filepath.Join(root, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/env", filepath.Join(root, "bin/hostenv")); err != nil { // the host's file, not the root's
		t.Fatal(err)
	}
	command := func(args []string, env []string, uid uint32) (string, []string) {
		p := newProcess("c1", "", guestRoot{path: "/r", host: root}, &specs.Process{Args: args, Env: env,
			User: specs.User{UID: uid, GID: uid, AdditionalGids: []uint32{uid}}}, "", "", "", false)
		c := p.command()
		return c.Path, c.Env
	}
	if path, env := command([]string{"sh", "-c", "true"}, []string{"PATH=/usr/local/bin:/bin"}, 1000); path != "/bin/sh" || !slices.Equal(env, []string{"PATH=/usr/local/bin:/bin", "HOME=/home/app"}) {
		t.Errorf("sh as app: path %q, env %q", path, env)
	}
	if path, env := command([]string{"hi"}, []string{"HOME=/srv"}, 0); path != "/usr/local/bin/hi" || !slices.Equal(env, []string{"HOME=/srv"}) {
		t.Errorf("hi in the default PATH, HOME given: path %q, env %q", path, env)
	}
	for _, args := range [][]string{{"missing"}, {"hostenv"}, {"/bin/hostenv"}} {
		if path, _ := command(args, []string{"PATH=/bin"}, 0); path != "" {
			t.Errorf("%q found at %q, want it left to the guest", args, path)
		}
	}
	if path, env := command([]string{"sh"}, nil, 4242); path != "/bin/sh" || !slices.Equal(env, []string{"HOME=/"}) {
		t.Errorf("a user without a passwd entry: path %q, env %q (want HOME=/ as the guest gives)", path, env)
	}
}

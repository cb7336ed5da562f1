package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestCopiedBinaryRunsAlone: bin/smol copied alone into an empty
// directory, with no SMOL_KERNEL, no build/ beside it and empty caches,
// runs a command and an image tarball: it carries its guest kernel and
// agent.
func TestCopiedBinaryRunsAlone(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(artifact(t, "bin/smol", "build"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "smol")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img.tar")
	ref, _ := name.ParseReference("test/alone:1")
	if err := tarball.WriteToFile(img, ref, image(t, v1.Config{Env: []string{"PATH=/bin"}}, busyboxLayer(t))); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SMOL_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+filepath.Join(dir, "home"), "SMOL_HOME="+filepath.Join(dir, "smolhome"))
	copied := smolCommand{bin: bin, env: env, dir: dir}
	for _, args := range [][]string{{"run", "--", "echo", "hi"}, {"run", "--image", img, "--", "echo", "hi"}} {
		code, out, stderr := smolRunAgainOnBoxFailure(t, args, func() (int, string, string, bool) {
			return copied.runOnce(t, nil, false, args...)
		})
		if code != 0 || out != "hi\n" {
			t.Fatalf("the copied smol %v: exit %d, stdout %q, stderr: %s", args, code, out, stderr)
		}
	}
	cached, _ := filepath.Glob(filepath.Join(dir, "home", ".cache", "smol", "guest", "*"))
	if len(cached) != 2 {
		t.Errorf("the guest files extracted into the cache: %v", cached)
	}
}

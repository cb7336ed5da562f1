package shim

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol/machine"
)

// TestMachineNames: every namespace and group gets its own valid machine
// name, the same one every time.
func TestMachineNames(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range [][2]string{{"default", "a"}, {"k8s.io", "a"}, {"default", "b"}, {"default/a", ""}} {
		n := machineName(g[0], g[1])
		if err := machine.ValidateName(n); err != nil {
			t.Errorf("%v: %v", g, err)
		}
		if seen[n] {
			t.Errorf("%v: %s twice", g, n)
		}
		seen[n] = true
		if machineName(g[0], g[1]) != n {
			t.Errorf("%v: not stable", g)
		}
	}
}

// TestCommandFromSpec: the OCI process becomes the agent's command in the
// container's root (read-only when the spec's root is), as numeric
// uid:gid with exactly the spec's supplementary groups, with its terminal.
func TestCommandFromSpec(t *testing.T) {
	p := newProcess("c1", "", guestRoot{path: "/run/smol/containers/c1", readOnly: true, writable: []string{"/data"}}, &specs.Process{
		Args: []string{"sh", "-c", "id"}, Env: []string{"A=1"}, Cwd: "/srv", Terminal: true,
		User: specs.User{UID: 1000, GID: 100, AdditionalGids: []uint32{100, 1234}}, ConsoleSize: &specs.Box{Height: 40, Width: 120},
	}, "", "", "", false)
	c := p.command()
	if c.Root != "/run/smol/containers/c1" || c.User != "1000:100" || c.Dir != "/srv" || !c.TTY || c.Rows != 40 || c.Cols != 120 || len(c.Args) != 3 || c.Env[0] != "A=1" ||
		!c.ReadOnlyRoot || len(c.WritablePaths) != 1 || c.WritablePaths[0] != "/data" || len(c.Groups) != 2 || c.Groups[1] != 1234 || c.Capabilities != nil {
		t.Errorf("command %+v", c)
	}
	if p.kill(9) {
		t.Error("a process not started took a signal")
	}
}

// TestCapabilitiesFromSpec: the OCI capability names become numbers set
// by set; a name this build does not know is left out.
func TestCapabilitiesFromSpec(t *testing.T) {
	c := capabilities(&specs.LinuxCapabilities{
		Bounding:  []string{"CAP_CHOWN", "CAP_NET_RAW", "CAP_FLY"},
		Effective: []string{"CAP_NET_RAW"},
		Ambient:   []string{},
	})
	if c == nil || len(c.Bounding) != 2 || c.Bounding[0] != 0 || c.Bounding[1] != 13 || len(c.Effective) != 1 || len(c.Permitted) != 0 || len(c.Ambient) != 0 {
		t.Errorf("capabilities %+v", c)
	}
	if capabilities(nil) != nil {
		t.Error("no capabilities in the spec became some")
	}
}

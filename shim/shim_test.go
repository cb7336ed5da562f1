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
// uid:gid with exactly the spec's supplementary groups, with its terminal
// and its no_new_privs.
func TestCommandFromSpec(t *testing.T) {
	p := newProcess("c1", "", guestRoot{path: "/run/smol/containers/c1", readOnly: true, writable: []string{"/data"}}, &specs.Process{
		Args: []string{"sh", "-c", "id"}, Env: []string{"A=1"}, Cwd: "/srv", Terminal: true,
		User: specs.User{UID: 1000, GID: 100, AdditionalGids: []uint32{100, 1234}}, ConsoleSize: &specs.Box{Height: 40, Width: 120},
		NoNewPrivileges: true,
	}, "", "", "", false)
	c := p.command()
	if c.Root != "/run/smol/containers/c1" || c.User != "1000:100" || c.Dir != "/srv" || !c.TTY || c.Rows != 40 || c.Cols != 120 || len(c.Args) != 3 || c.Env[0] != "A=1" ||
		!c.ReadOnlyRoot || len(c.WritablePaths) != 1 || c.WritablePaths[0] != "/data" || len(c.Groups) != 2 || c.Groups[1] != 1234 || c.Capabilities != nil || !c.NoNewPrivileges {
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

// TestPIDNamespaceFromSpec: as CRI writes specs, a container's processes
// run in its own namespace (an entry without a path; its init starts
// it, its execs join), in the pod sandbox's (a path: a pod sharing its
// namespace, or a hostPID pod whose sandbox runs in the VM's), or in the
// VM's (no entry: a hostPID sandbox, or a spec without Linux).
func TestPIDNamespaceFromSpec(t *testing.T) {
	spec := func(sandbox string, entries ...specs.LinuxNamespace) *specs.Spec {
		s := &specs.Spec{Linux: &specs.Linux{Namespaces: append([]specs.LinuxNamespace{{Type: specs.NetworkNamespace}}, entries...)}}
		if sandbox != "" {
			s.Annotations = map[string]string{sandboxAnnotation: sandbox}
		}
		return s
	}
	own := specs.LinuxNamespace{Type: specs.PIDNamespace}
	shared := specs.LinuxNamespace{Type: specs.PIDNamespace, Path: "/proc/42/ns/pid"}
	for _, c := range []struct {
		what      string
		spec      *specs.Spec
		sandboxNS string
		name      string
		starts    bool
	}{
		{"a container of its own (NamespaceMode_CONTAINER)", spec("sb", own), "sb", "c1", true},
		{"a lone container (ctr run)", spec("", own), "", "c1", true},
		{"a container sharing its pod's", spec("sb", shared), "sb", "sb", false},
		{"a container of a hostPID pod", spec("sb", shared), "", "", false},
		{"a hostPID sandbox", spec("sb"), "", "", false},
		{"a path without a pod", spec("", shared), "", "c1", true},
		{"no Linux section", &specs.Spec{}, "sb", "", false},
	} {
		p := newProcess("c1", "", guestRoot{path: "/r"}, &specs.Process{Args: []string{"true"}}, "", "", "", false)
		p.root.pidNamespace, p.root.ownPIDNamespace = pidNamespace(c.spec, "c1", c.sandboxNS)
		if cmd := p.command(); cmd.PIDNamespace != c.name || cmd.NewPIDNamespace != c.starts {
			t.Errorf("%s: namespace %q (starts it: %v), want %q (%v)", c.what, cmd.PIDNamespace, cmd.NewPIDNamespace, c.name, c.starts)
		}
		exec := newProcess("c1", "e1", p.root, &specs.Process{Args: []string{"true"}}, "", "", "", false)
		if cmd := exec.command(); cmd.PIDNamespace != c.name || cmd.NewPIDNamespace {
			t.Errorf("%s: an exec's namespace %q (starts it: %v), want to join %q", c.what, cmd.PIDNamespace, cmd.NewPIDNamespace, c.name)
		}
	}
}

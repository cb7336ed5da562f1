package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/pack"
	"github.com/spf13/pflag"
)

// A stub is this binary with a pack's trailer (smol pack create): run as
// ./PATH, it is the runner of that pack and of the machine named after
// it, and takes only the commands below. Its machines' VMM processes are
// the stub itself, run as `smol machine __vmm`, which goes to the normal
// dispatch.

const stubUsage = `Usage: %[1]s COMMAND

%[1]s runs the smol machine packed in %[2]s.

Commands:
  run [flags] [-- CMD ARGS...]   run a command (default: the packed one) in a
                                 throwaway machine of the pack
  start                          create (the first time) and boot machine %[3]s
  exec [flags] -- CMD ARGS...    run a command in machine %[3]s
  shell                          an interactive shell in it
  stop [--timeout 10s]           shut it down
  status [--json]                its state
  rm [-f]                        remove it (the pack stays)
  inspect [--json]               what the pack holds
  verify                         check the pack against its digests
`

// stubResult is what ownStub found: a plain smol has no trailer; a
// damaged trailer is reported by stubMain.
type stubResult struct {
	stub *pack.Stub
	err  error
}

// ownStub reads this executable's trailer: nil for a plain smol.
func ownStub() (string, *stubResult) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil
	}
	s, err := pack.ReadStub(exe)
	if errors.Is(err, pack.ErrNoStub) || errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return exe, &stubResult{s, err}
}

// isVMMCall tells a machine's VMM process (smol machine __vmm NAME ...).
func isVMMCall(args []string) bool {
	return len(args) >= 2 && args[0] == "machine" && args[1] == smol.VMMCommand
}

func stubMain(exe string, s *stubResult, args []string) int {
	if s.err != nil {
		return report(0, fmt.Errorf("%s: %w", exe, s.err))
	}
	smol.VMMExecutable = exe
	return report(stubCommand(exe, args))
}

func stubCommand(exe string, args []string) (int, error) {
	self := filepath.Base(exe)
	packName := self + " itself"
	if st, _ := pack.ReadStub(exe); st != nil && st.Sidecar != "" {
		packName = st.Sidecar
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(os.Stderr, stubUsage, "./"+self, packName, self)
		if len(args) == 0 {
			return 2, nil
		}
		return 0, nil
	}
	sub, rest := args[0], args[1:]
	if sub == "run" {
		return stubRun(exe, rest)
	}
	if sub == "inspect" || sub == "verify" {
		if sub == "inspect" {
			return 0, packInspect(append([]string{exe}, rest...))
		}
		return 0, packVerify(append([]string{exe}, rest...))
	}
	name := self
	if err := machine.ValidateName(name); err != nil {
		return 0, fmt.Errorf("the stub's name is its machine's: %w (rename it)", err)
	}
	switch sub {
	case "start":
		if len(rest) > 0 {
			return 0, usageError{"start takes no arguments"}
		}
		return 0, stubStart(exe, name)
	case "exec", "shell", "stop", "status", "rm":
		return machineCommand(append([]string{sub, name}, rest...))
	}
	return 0, usageError{fmt.Sprintf("unknown command %q (try './%s help')", sub, self)}
}

// stubStart creates the stub's machine from its pack the first time, and
// boots it.
func stubStart(exe, name string) error {
	ctx := context.Background()
	m, err := smol.OpenMachine(name)
	if errors.Is(err, machine.ErrNotFound) {
		m, err = smol.CreateMachine(ctx, smol.MachineConfig{Name: name, From: exe, Progress: progressWriter()})
	} else if err == nil {
		r, perr := smol.OpenPack(exe)
		if perr != nil {
			return perr
		}
		id := r.ID
		r.Close()
		if m.Spec().Pack != id {
			return fmt.Errorf("machine %s was not made from this pack: remove it first (./%s rm), or rename the stub", name, filepath.Base(exe))
		}
	}
	if err != nil {
		return err
	}
	return startMachine(ctx, m)
}

// startMachine starts m, saying so when its packed live state cannot be
// resumed here and it boots cold instead.
func startMachine(ctx context.Context, m *smol.NamedMachine) error {
	var hostCPU *smol.HostCPUError
	if pending, err := m.LiveState(); pending && errors.As(err, &hostCPU) {
		fmt.Fprintf(os.Stderr, "smol: machine %s: its packed running state cannot resume on this host (%v); booting it cold\n", m.Name(), err)
	}
	return m.Start(ctx)
}

// stubRun is ./PATH run: smol run in a throwaway machine of the pack.
func stubRun(exe string, args []string) (int, error) {
	fs := pflag.NewFlagSet(filepath.Base(exe)+" run", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetInterspersed(false)
	var w workload
	cpus := fs.Int("cpus", 0, "number of vCPUs (default: the pack's)")
	mem := fs.String("mem", "", "guest memory (default: the pack's)")
	fs.StringArrayVarP(&w.env, "env", "e", nil, "set KEY=VALUE in the command's environment; repeatable")
	fs.StringVarP(&w.workdir, "workdir", "w", "", "the command's working directory (default: the pack's)")
	fs.StringVarP(&w.user, "user", "u", "", "run as USER[:GROUP] or UID[:GID] (default: the pack's)")
	fs.BoolVarP(&w.interactive, "interactive", "i", false, "pass stdin to the command")
	fs.BoolVarP(&w.tty, "tty", "t", false, "run the command on a terminal in the guest")
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0, err
		}
		return 0, usageError{err.Error()}
	}
	w.pack, w.pull, w.args = exe, "never", fs.Args()
	w.cfg.CPUs = *cpus
	if *mem != "" {
		m, err := smol.ParseSize(*mem)
		if err != nil {
			return 0, usageError{"--mem: " + err.Error()}
		}
		w.cfg.Memory = m
	}
	if w.cfg.CPUs != 0 || w.cfg.Memory != 0 {
		if err := checkShape(max(w.cfg.CPUs, 1), max(w.cfg.Memory, smol.MinMemory)); err != nil {
			return 0, err
		}
	}
	return w.run()
}

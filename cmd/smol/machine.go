package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/machine"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

const machineUsage = `Usage: smol machine COMMAND [flags] NAME ...

Persistent machines: named microVMs that keep running between commands,
each run by a VMM process of its own, with a writable root that survives
stop and start.

Commands:
  create NAME [--image REF] [flags] record a machine (nothing boots; no image: smol's busybox root)
  create NAME --from FILE           the machine a pack holds (smol pack create; a stub or .smolmachine)
  start NAME                        boot it; it keeps running after smol exits
  stop NAME [--timeout 10s]         shut it down cleanly (stopped hard after the timeout)
  restart NAME [--timeout 10s]      stop, then start
  pause NAME | resume NAME          park its vCPUs (no CPU used) / let them run again
  exec NAME [flags] -- CMD ARGS...  run a command in it (as smol run does)
  shell NAME                        an interactive login shell in it
  cp SRC DST                        copy files or trees in or out; NAME:/path on one side
  ls [--json]                       list machines
  status NAME [--json]              one machine's state
  logs NAME [-f]                    its console and agent log
  events NAME [-f]                  its network egress log (one JSON line per flow)
  snapshot NAME -o PATH [--leave-running]
                                    write its state, RAM and disks to one file (then stop it)
  restore PATH --name NEW           a new machine from a snapshot, continuing where it was
  fork NAME [--count N] [--name-prefix P] [--template]
                                    branch it into N running children (copy-on-write RAM and disks)
  screenshot NAME -o FILE           its screen as PNG (a machine created with --gpu)
  view NAME [--listen ADDR]         its screen live in a web browser, with keyboard and mouse
  rm [-f] NAME                      remove it and its files (-f: even if running)
  run [flags] -- CMD ARGS...        the same as smol run

Run 'smol machine COMMAND --help' for a command's flags.
`

// machineCommand dispatches `smol machine ...`.
func machineCommand(args []string) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, machineUsage)
		return 2, nil
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case smol.VMMCommand:
		signal.Ignore(unix.SIGHUP, unix.SIGINT, unix.SIGPIPE) // detached: only stop and SIGTERM/SIGKILL end it
		return 0, machineVMM(rest)
	case "snapshot":
		return 0, machineSnapshot(rest)
	case "restore":
		return 0, machineRestore(rest)
	case "fork":
		return 0, machineFork(rest)
	case "create":
		return 0, machineCreate(rest)
	case "start":
		return 0, withMachine("start", rest, startMachine)
	case "stop", "restart":
		return 0, machineStop(sub, rest)
	case "pause":
		return 0, withMachine("pause", rest, func(ctx context.Context, m *smol.NamedMachine) error { return m.Pause(ctx) })
	case "resume":
		return 0, withMachine("resume", rest, func(ctx context.Context, m *smol.NamedMachine) error { return m.Resume(ctx) })
	case "exec":
		return machineExec(rest, false)
	case "shell":
		return machineExec(rest, true)
	case "cp":
		return 0, machineCopy(rest)
	case "ls":
		return 0, machineList(rest)
	case "status":
		return 0, machineStatus(rest)
	case "logs":
		return 0, machineLog("logs", rest, (*smol.NamedMachine).Logs)
	case "events":
		return 0, machineLog("events", rest, (*smol.NamedMachine).Events)
	case "rm":
		return 0, machineRemove(rest)
	case "screenshot":
		return 0, machineScreenshot(rest)
	case "view":
		return 0, machineView(rest)
	case "run":
		return runCommand(rest)
	case "help", "-h", "--help":
		fmt.Print(machineUsage)
		return 0, nil
	}
	return 0, usageError{fmt.Sprintf("unknown machine command %q (try 'smol machine help')", sub)}
}

func newFlags(name, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("smol machine "+name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: smol machine %s %s\n\nFlags:\n%s", name, usage, fs.FlagUsages())
	}
	return fs
}

// parse parses flags and wants exactly n names (or any number when n<0).
func parse(fs *pflag.FlagSet, args []string, n int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if n >= 0 && fs.NArg() != n {
		return nil, usageError{fmt.Sprintf("smol machine %s: want %d machine name(s), got %d (see --help)", fs.Name()[len("smol machine "):], n, fs.NArg())}
	}
	return fs.Args(), nil
}

func withMachine(name string, args []string, fn func(context.Context, *smol.NamedMachine) error) error {
	fs := newFlags(name, "NAME")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	return fn(context.Background(), m)
}

func machineCreate(args []string) error {
	fs := newFlags("create", "NAME [--image REF] [flags]")
	image := fs.String("image", "", "the image its root is made from (as for smol run --image; default: smol's busybox root)")
	from := fs.String("from", "", "make it the machine packed in FILE (a .smolmachine or its stub): no pull, no image cache")
	pull := fs.String("pull", "missing", "when to pull --image: missing, always or never")
	insecure := fs.Bool("insecure", false, "allow plain http and unverified TLS for --image's registry")
	cpus := fs.Int("cpus", smol.DefaultCPUs, "number of vCPUs")
	mem := fs.String("mem", "8G", "guest memory (taken from the host only as the guest uses it)")
	storage := fs.String("storage", "20G", "size of the writable layer that persists (a sparse file)")
	inMemory := fs.Bool("in-memory", false, "run smol's busybox root from memory, with no root disk or writable layer: its files start afresh at every start (faster to boot; no --image, --storage or --from; cannot be snapshotted, forked or packed)")
	disks := fs.StringArray("disk", nil, "extra raw disk, PATH or PATH:ro; repeatable")
	volumes := fs.StringArrayP("volume", "v", nil, "share the host directory HOST at GUEST in every start: HOST:GUEST[:ro]; repeatable")
	env := fs.StringArrayP("env", "e", nil, "KEY=VALUE for every exec (KEY alone: the host's value); repeatable")
	workdir := fs.StringP("workdir", "w", "", "every exec's working directory (default: the image's WORKDIR)")
	user := fs.StringP("user", "u", "", "run execs as USER[:GROUP] (default: the image's USER)")
	hostname := fs.String("hostname", "", "the guest's host name (default: the machine's name)")
	irqchip := fs.String("irqchip", string(smol.DefaultIRQChip), "where the interrupt controllers live at every cold start: split or kernel (as for smol run)")
	network := addNetFlags(fs)
	display := addGPUFlags(fs)
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	policy, err := imagefs.ParsePullPolicy(*pull)
	if err != nil {
		return usageError{"--pull: " + err.Error()}
	}
	c := smol.MachineConfig{Name: names[0], Image: *image, From: *from, Pull: policy, Insecure: *insecure, Progress: progressWriter(),
		CPUs: *cpus, Workdir: *workdir, User: *user, Hostname: *hostname}
	if c.From != "" && c.Image != "" {
		return usageError{"--from and --image exclude each other"}
	}
	if c.InMemory = *inMemory; c.InMemory {
		for _, other := range []string{"image", "from", "storage"} {
			if fs.Changed(other) {
				return usageError{"--in-memory and --" + other + " exclude each other"}
			}
		}
	}
	if fs.Changed("irqchip") { // else the pack's, or the default
		if _, err := smol.ParseIRQChip(*irqchip); err != nil {
			return usageError{"--irqchip: " + err.Error()}
		}
		c.IRQChip = *irqchip
	}
	if c.Memory, err = smol.ParseSize(*mem); err != nil {
		return usageError{"--mem: " + err.Error()}
	}
	if err := checkShape(*cpus, c.Memory); err != nil {
		return err
	}
	if c.Net, err = network.config(); err != nil {
		return err
	}
	if c.Volumes, err = parseVolumes(*volumes); err != nil {
		return err
	}
	if c.GPU, err = display.config(); err != nil {
		return err
	}
	st, err := smol.ParseSize(*storage)
	if err != nil {
		return usageError{"--storage: " + err.Error()}
	}
	if !c.InMemory {
		c.Storage = int64(st)
	}
	if c.From != "" { // the pack's shape, but where the flags say otherwise
		if !fs.Changed("cpus") {
			c.CPUs = 0
		}
		if !fs.Changed("mem") {
			c.Memory = 0
		}
		if !fs.Changed("storage") {
			c.Storage = 0
		}
	}
	for _, d := range *disks {
		disk, err := parseDisk(d)
		if err != nil {
			return err
		}
		c.Disks = append(c.Disks, disk)
	}
	if c.Env, err = expandEnv(*env); err != nil {
		return err
	}
	_, err = smol.CreateMachine(context.Background(), c)
	return err
}

func machineStop(sub string, args []string) error {
	fs := newFlags(sub, "NAME [--timeout 10s]")
	timeout := fs.Duration("timeout", machine.DefaultStopTimeout, "how long the guest gets to shut down cleanly before it is stopped hard")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *timeout < 0 {
		return usageError{"--timeout: negative"}
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := m.Stop(ctx, *timeout); err != nil && !(sub == "restart" && notRunning(ctx, m)) {
		return err
	}
	if sub == "restart" {
		return startMachine(ctx, m)
	}
	return nil
}

func notRunning(ctx context.Context, m *smol.NamedMachine) bool {
	s, err := m.Status(ctx)
	return err == nil && s.State != machine.Running && s.State != machine.Starting
}

func machineExec(args []string, shell bool) (int, error) {
	usage := "NAME [flags] -- CMD [ARG...]"
	if shell {
		usage = "NAME"
	}
	fs := newFlags(map[bool]string{false: "exec", true: "shell"}[shell], usage)
	fs.SetInterspersed(false)
	var env []string
	var workdir, user string
	var interactive, tty bool
	fs.StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE (KEY alone: the host's value); repeatable")
	fs.StringVarP(&workdir, "workdir", "w", "", "working directory")
	fs.StringVarP(&user, "user", "u", "", "run as USER[:GROUP] or UID[:GID]")
	if !shell {
		fs.BoolVarP(&interactive, "interactive", "i", false, "pass smol's stdin to the command")
		fs.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal in the guest")
	}
	// The name comes first: smol machine exec NAME [flags] -- CMD.
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fs.Usage()
			return 0, pflag.ErrHelp
		}
		return 0, usageError{"smol machine " + fs.Name()[len("smol machine "):] + ": the machine's name comes first (see --help)"}
	}
	name := args[0]
	rest, err := parse(fs, args[1:], -1)
	if err != nil {
		return 0, err
	}
	cmd := smol.Command{Dir: workdir, User: user}
	if shell {
		if len(rest) > 0 {
			return 0, usageError{"smol machine shell takes no command"}
		}
		cmd.Args = []string{"/bin/sh", "-l"}
		interactive, tty = true, isTerminal(int(os.Stdin.Fd()))
	} else {
		if len(rest) == 0 {
			return 0, usageError{"smol machine exec: no command (smol machine exec NAME -- CMD ARGS...)"}
		}
		cmd.Args = rest
	}
	if cmd.Env, err = expandEnv(env); err != nil {
		return 0, err
	}
	m, err := smol.OpenMachine(name)
	if err != nil {
		return 0, err
	}
	defer attach(&cmd, interactive, tty)()
	return commandResult(m.Exec(context.Background(), cmd))
}

func machineCopy(args []string) error {
	fs := newFlags("cp", "SRC DST (NAME:/path on one side)")
	paths, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	srcName, srcPath, srcIn := splitMachinePath(paths[0])
	dstName, dstPath, dstIn := splitMachinePath(paths[1])
	if srcIn == dstIn {
		return usageError{"smol machine cp: one side must be NAME:/path and the other a host path"}
	}
	name, guestPath := srcName, srcPath
	if dstIn {
		name, guestPath = dstName, dstPath
	}
	if !strings.HasPrefix(guestPath, "/") {
		return usageError{fmt.Sprintf("smol machine cp: %s:%s: the guest path must be absolute", name, guestPath)}
	}
	m, err := smol.OpenMachine(name)
	if err != nil {
		return err
	}
	if srcIn {
		return m.CopyOut(context.Background(), srcPath, paths[1])
	}
	return m.CopyIn(context.Background(), paths[0], dstPath)
}

// splitMachinePath reads NAME:/path; a host path (even one with a colon)
// is anything whose part before the colon is not a machine name.
func splitMachinePath(s string) (name, p string, ok bool) {
	name, p, found := strings.Cut(s, ":")
	if !found || machine.ValidateName(name) != nil || strings.Contains(name, "/") {
		return "", s, false
	}
	return name, p, true
}

func machineList(args []string) error {
	fs := newFlags("ls", "[--json]")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	list, err := smol.ListMachines(context.Background())
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []smol.MachineStatus{}
		}
		return printJSON(list)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tIMAGE\tCPUS\tMEMORY\tHOST MEMORY\tUPTIME")
	for _, s := range list {
		host, up := "-", "-"
		if s.State == machine.Running || s.State == machine.Paused {
			host, up = humanSize(s.HostMemory), time.Duration(s.Uptime).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, s.State, s.Image, s.CPUs, humanSize(s.Memory), host, up)
	}
	return tw.Flush()
}

func machineStatus(args []string) error {
	fs := newFlags("status", "NAME [--json]")
	asJSON := fs.Bool("json", false, "print JSON")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	s, err := m.Status(context.Background())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(s)
	}
	fmt.Printf("name:    %s\nstate:   %s\nimage:   %s\ncpus:    %d\nmemory:  %s\n", s.Name, s.State, s.Image, s.CPUs, humanSize(s.Memory))
	if s.IRQChip != "" {
		fmt.Printf("irqchip: %s\n", s.IRQChip)
	}
	if s.State == machine.Running || s.State == machine.Paused {
		fmt.Printf("pid:     %d\nuptime:  %s\nhost memory: %s\n", s.PID, time.Duration(s.Uptime), humanSize(s.HostMemory))
	}
	if s.Error != "" {
		fmt.Printf("error:   %s\n", s.Error)
	}
	if s.LastConsole != "" {
		fmt.Printf("last console lines:\n%s\n", s.LastConsole)
	}
	return nil
}

// machineLog implements logs and events: print one of a machine's
// bounded logs, and with -f keep printing it.
func machineLog(name string, args []string, read func(*smol.NamedMachine, context.Context, io.Writer, bool) error) error {
	fs := newFlags(name, "NAME [-f]")
	follow := fs.BoolP("follow", "f", false, "keep printing as the log grows")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	return read(m, context.Background(), os.Stdout, *follow)
}

func machineRemove(args []string) error {
	fs := newFlags("rm", "[-f] NAME")
	force := fs.BoolP("force", "f", false, "remove even a running machine (it is stopped hard)")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *force {
		if err := machine.ValidateName(names[0]); err != nil {
			return err
		}
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		if *force && !errors.Is(err, machine.ErrNotFound) {
			return smol.RemoveDamagedMachine(names[0])
		}
		return err
	}
	return m.Remove(context.Background(), *force)
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func humanSize(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0fM", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%dK", b>>10)
}

package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/machine"
	"github.com/spf13/pflag"
)

// runCommand implements `smol run`: boot, attach the console, wait. It
// returns the process exit status: 0 after a clean poweroff or reboot.
func runCommand(args []string) (int, error) {
	fs := pflag.NewFlagSet("smol run", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetInterspersed(false) // flags end at the command: smol run --image x ls -l
	kernel := fs.String("kernel", "", "Linux kernel: vmlinux (ELF) or bzImage (default: the one 'make kernel' built)")
	initrd := fs.String("initrd", "", "initramfs to load")
	cmdline := fs.String("cmdline", "", "extra kernel command line, after smol's defaults ("+smol.DefaultCmdline+")")
	cpus := fs.Int("cpus", smol.DefaultCPUs, "number of vCPUs")
	mem := fs.String("mem", "8G", "guest memory (K, M, G suffixes; taken from the host only as the guest uses it)")
	disks := fs.StringArray("disk", nil, "raw disk image as a virtio block device, PATH or PATH:ro; repeatable, the first is /dev/vda")
	volumes := fs.StringArrayP("volume", "v", nil, "share the host directory HOST with the guest at GUEST: HOST:GUEST[:ro] (virtio-9p; confined to HOST); repeatable")
	network := addNetFlags(fs)
	display := addGPUFlags(fs)
	consoleLog := fs.String("console-log", "", "append the guest's serial console (its kernel's messages) to FILE, rotated to FILE.1 at 1 MiB; with a COMMAND it is otherwise discarded")
	egressLog := fs.String("egress-log", "", "append the network gateway's egress log (one JSON line per flow and denied name) to FILE, kept under 2 MiB")
	netTAP := fs.String("net-tap", "", "give the guest a network device on host TAP interface NAME (created if needed; needs CAP_NET_ADMIN)")
	mac := fs.String("mac", "", "the guest's MAC address with --net-tap (default: derived from the TAP name)")
	vsockPath := fs.String("vsock", "", "give the guest a vsock device whose host side is the Unix socket PATH (guest connections to port P go to PATH_P)")
	cid := fs.Uint64("cid", 3, "the guest's vsock context ID")
	bootTime := fs.Bool("boot-time", false, "print milliseconds from VMM start to first KVM_RUN and to guest userspace, on stderr")
	exitStats := fs.Bool("exit-stats", false, "print the most frequent vCPU exits on stderr when the VM ends")
	noDefaultDevices := fs.Bool("no-default-devices", false, "leave out the entropy and balloon devices every guest otherwise gets (to measure what they cost)")
	irqchip := fs.String("irqchip", string(smol.DefaultIRQChip), "where the interrupt controllers live: split (I/O APIC in smol, device interrupts as MSIs) or kernel (PIC, I/O APIC and PIT in KVM)")
	var w workload
	fs.StringVar(&w.image, "image", "", "run an OCI image: a registry reference (python:3.12-alpine), a docker-save or OCI-layout tarball, or an OCI-layout directory")
	fs.StringVar(&w.pull, "pull", "missing", "when to pull --image from its registry: missing, always or never")
	fs.BoolVar(&w.insecure, "insecure", false, "allow plain http and unverified TLS for --image's registry (localhost is always allowed http)")
	fs.StringArrayVarP(&w.env, "env", "e", nil, "set KEY=VALUE in the command's environment (KEY alone: the host's value); repeatable")
	fs.StringVarP(&w.workdir, "workdir", "w", "", "the command's working directory (default: the image's WORKDIR)")
	fs.StringVarP(&w.user, "user", "u", "", "run as USER[:GROUP] or UID[:GID] (default: the image's USER)")
	fs.BoolVarP(&w.interactive, "interactive", "i", false, "pass smol's stdin to the command")
	fs.BoolVarP(&w.tty, "tty", "t", false, "run the command on a terminal in the guest")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: smol run [flags] [-- COMMAND [ARG...]]\n\nWith --image or a COMMAND: run the command in a microVM (in the image, or in\nsmol's busybox root) and exit with its status; stdout and stderr stay separate.\n\nWithout: boot a Linux kernel with its serial console on this terminal.\nOn a terminal, type Ctrl-A x to stop the VM.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0, err
		}
		return 0, usageError{err.Error()}
	}
	workloadMode := w.image != "" || fs.NArg() > 0
	if !workloadMode {
		for _, name := range []string{"pull", "insecure", "env", "workdir", "user", "interactive", "tty"} {
			if fs.Changed(name) {
				return 0, usageError{fmt.Sprintf("--%s needs --image or a command", name)}
			}
		}
	} else {
		for _, name := range []string{"boot-time", "exit-stats", "vsock", "cid"} {
			if fs.Changed(name) {
				return 0, usageError{fmt.Sprintf("--%s cannot be used with --image or a command", name)}
			}
		}
	}
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		return 0, usageError{"--mem: " + err.Error()}
	}
	if err := checkShape(*cpus, memBytes); err != nil {
		return 0, err
	}
	if _, err := smol.ParseIRQChip(*irqchip); err != nil {
		return 0, usageError{"--irqchip: " + err.Error()}
	}

	cfg := smol.Config{Kernel: *kernel, Initrd: *initrd, Cmdline: *cmdline, CPUs: *cpus, Memory: memBytes,
		NoBalloon: *noDefaultDevices, NoEntropy: *noDefaultDevices, IRQChip: *irqchip}
	for _, d := range *disks {
		disk, err := parseDisk(d)
		if err != nil {
			return 0, err
		}
		cfg.Disks = append(cfg.Disks, disk)
	}
	if cfg.Net, err = network.config(); err != nil {
		return 0, err
	}
	if cfg.Volumes, err = parseVolumes(*volumes); err != nil {
		return 0, err
	}
	if cfg.GPU, err = display.config(); err != nil {
		return 0, err
	}
	switch {
	case *netTAP != "" && cfg.Net != nil:
		return 0, usageError{"--net-tap cannot be used with --net, --allow-host, --allow-cidr or --dns (they need smol's gateway)"}
	case *netTAP != "":
		cfg.Net = &smol.Net{TAP: *netTAP, MAC: *mac}
	case *mac != "":
		return 0, usageError{"--mac needs --net-tap"}
	}
	if *egressLog != "" {
		if cfg.Net == nil || cfg.Net.TAP != "" {
			return 0, usageError{"--egress-log needs --net"}
		}
		log, err := machine.OpenLog(*egressLog)
		if err != nil {
			return 0, fmt.Errorf("--egress-log: %w", err)
		}
		defer log.Close()
		cfg.EgressLog = log
	}
	if *consoleLog != "" {
		log, err := machine.OpenLog(*consoleLog)
		if err != nil {
			return 0, fmt.Errorf("--console-log: %w", err)
		}
		defer log.Close()
		cfg.Console = log
	}
	if *vsockPath != "" {
		cfg.Vsock = &smol.Vsock{Path: *vsockPath, CID: *cid}
	} else if fs.Changed("cid") {
		return 0, usageError{"--cid needs --vsock"}
	}

	if workloadMode {
		w.args, w.cfg = fs.Args(), cfg
		return w.run()
	}

	console, err := attachConsole()
	if err != nil {
		return 0, err
	}
	defer console.restore()
	if cfg.Console != nil { // --console-log: the terminal and the file
		cfg.Console = io.MultiWriter(os.Stdout, cfg.Console)
	} else {
		cfg.Console = os.Stdout
	}
	cfg.ConsoleInput = console.input
	m, err := smol.Start(cfg)
	if err != nil {
		return 0, err
	}
	defer m.Close()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var killedBy os.Signal
	go func() {
		select {
		case killedBy = <-signals:
			m.Stop()
		case <-console.escape:
			m.Stop()
		case <-m.Done():
		}
	}()
	exit, err := m.Wait()
	console.restore()
	if *bootTime {
		printBootTimes(m.BootTimes())
	}
	if *exitStats {
		printExitStats(m.ExitStats())
		printKVMStats(m)
	}
	if err != nil {
		return 0, err
	}
	if exit.Reason == "stopped" {
		if s, ok := killedBy.(syscall.Signal); ok {
			return 128 + int(s), nil
		}
		fmt.Fprintln(os.Stderr, "smol: VM stopped")
		return 0, nil
	}
	return 0, nil
}

func printBootTimes(t smol.BootTimes) {
	ms := func(at time.Time) string {
		if at.IsZero() {
			return "not reached"
		}
		return fmt.Sprintf("%.1f ms", float64(at.Sub(processStart).Microseconds())/1000)
	}
	fmt.Fprintf(os.Stderr, "boot-time: first KVM_RUN %s, userspace %s\n", ms(t.FirstRun), ms(t.Userspace))
}

func printExitStats(stats []smol.ExitStat) {
	var total uint64
	for _, s := range stats {
		total += s.Count
	}
	fmt.Fprintf(os.Stderr, "exit-stats: %d exits\n", total)
	for i, s := range stats {
		if i == 10 {
			break
		}
		fmt.Fprintf(os.Stderr, "exit-stats: %8d %-4s %#x\n", s.Count, s.Kind, s.Addr)
	}
}

// printKVMStats adds KVM's own counters to --exit-stats: exits KVM handled
// itself never reach the VMM's counts.
func printKVMStats(m *smol.Machine) {
	stats, err := m.KVMStats()
	if err != nil {
		fmt.Fprintf(os.Stderr, "exit-stats: no KVM statistics: %v\n", err)
		return
	}
	for i, s := range stats {
		if i == 16 {
			break
		}
		fmt.Fprintf(os.Stderr, "kvm-stats: %12d %s\n", s.Value, s.Name)
	}
}

// parseDisk reads --disk PATH[:ro|:rw].
func parseDisk(arg string) (smol.Disk, error) {
	d := smol.Disk{Path: arg}
	switch {
	case strings.HasSuffix(arg, ":ro"):
		d.Path, d.ReadOnly = strings.TrimSuffix(arg, ":ro"), true
	case strings.HasSuffix(arg, ":rw"):
		d.Path = strings.TrimSuffix(arg, ":rw")
	}
	if d.Path == "" {
		return d, usageError{fmt.Sprintf("--disk %q: no path", arg)}
	}
	return d, nil
}

// checkShape holds --cpus and --mem to what smol can boot, naming the flag.
func checkShape(cpus int, mem uint64) error {
	if cpus < 1 || cpus > smol.MaxCPUs {
		return usageError{fmt.Sprintf("--cpus %d: want 1 to %d", cpus, smol.MaxCPUs)}
	}
	if mem < smol.MinMemory {
		return usageError{fmt.Sprintf("--mem %s is too small: a Linux guest needs at least %d MiB", humanSize(mem), smol.MinMemory>>20)}
	}
	if mem%4096 != 0 {
		return usageError{fmt.Sprintf("--mem %d bytes: want a multiple of 4 KiB", mem)}
	}
	return nil
}

// parseVolumes reads -v values.
func parseVolumes(values []string) ([]smol.Volume, error) {
	var vols []smol.Volume
	for _, s := range values {
		v, err := smol.ParseVolume(s)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		vols = append(vols, v)
	}
	return vols, nil
}

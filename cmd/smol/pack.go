package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/internal/units"
	"github.com/smolvm/smol/pack"
	"github.com/spf13/pflag"
)

const packUsage = `Usage: smol pack COMMAND ...

Portable machines: an image or a machine packed into PATH.smolmachine (its
kernel, agent, root, writable layer and, with --live, its running state)
and PATH, a runnable stub that uses it:

  ./PATH run [-- CMD]            a throwaway machine of the pack
  ./PATH start|exec|shell|stop|status
                                 a machine named after PATH

Commands:
  create (--image REF | --from-machine NAME) -o PATH [flags]
                                 write PATH and PATH.smolmachine
  inspect FILE [--json]          what a pack (or a stub's pack) holds
  verify FILE                    check every section against its digest

Run 'smol pack COMMAND --help' for a command's flags.
`

func packCommand(args []string) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, packUsage)
		return 2, nil
	}
	switch args[0] {
	case "create":
		return 0, packCreate(args[1:])
	case "inspect":
		return 0, packInspect(args[1:])
	case "verify":
		return 0, packVerify(args[1:])
	case "help", "-h", "--help":
		fmt.Print(packUsage)
		return 0, nil
	}
	return 0, usageError{fmt.Sprintf("unknown pack command %q (try 'smol pack help')", args[0])}
}

func packFlags(name, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("smol pack "+name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: smol pack %s %s\n\nFlags:\n%s", name, usage, fs.FlagUsages())
	}
	return fs
}

// parseArgs parses flags and wants exactly n arguments.
func parseArgs(fs *pflag.FlagSet, args []string, n int, what string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() != n {
		return nil, usageError{fmt.Sprintf("%s: want %s (see --help)", fs.Name(), what)}
	}
	return fs.Args(), nil
}

func packCreate(args []string) error {
	fs := packFlags("create", "(--image REF | --from-machine NAME) -o PATH [flags]")
	var c smol.PackConfig
	fs.StringVar(&c.Image, "image", "", "pack a machine of this image (as for smol run --image)")
	pull := fs.String("pull", "missing", "when to pull --image: missing, always or never")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow plain http and unverified TLS for --image's registry")
	fs.StringVar(&c.FromMachine, "from-machine", "", "pack this stopped machine, its writable layer as it is now")
	fs.BoolVar(&c.Live, "live", false, "with --from-machine of a running machine: also pack its running processes (resumed where the CPU allows)")
	fs.StringVarP(&c.Output, "output", "o", "", "write the stub PATH and its pack PATH.smolmachine")
	fs.BoolVar(&c.SingleFile, "single-file", false, "put the pack inside the stub: one file, PATH")
	fs.BoolVar(&c.Force, "force", false, "replace existing output files")
	cpus := fs.Int("cpus", 0, "the packed machine's vCPUs (default: the machine's, or 4)")
	mem := fs.String("mem", "", "its memory (default: the machine's, or 8G)")
	storage := fs.String("storage", "", "the size of its writable layer (default: the machine's, or 20G)")
	env := fs.StringArrayP("env", "e", nil, "KEY=VALUE for every command it runs; repeatable")
	fs.StringVarP(&c.Workdir, "workdir", "w", "", "its commands' working directory")
	fs.StringVarP(&c.User, "user", "u", "", "run its commands as USER[:GROUP]")
	entrypoint := fs.String("entrypoint", "", "replace the image's ENTRYPOINT (a command line split at spaces; clears CMD)")
	cmd := fs.StringArray("cmd", nil, "replace the image's CMD, one argument per flag")
	network := addNetFlags(fs)
	if _, err := parseArgs(fs, args, 0, "no arguments besides the flags"); err != nil {
		return err
	}
	var err error
	if c.Pull, err = imagefs.ParsePullPolicy(*pull); err != nil {
		return usageError{"--pull: " + err.Error()}
	}
	if c.Output == "" {
		return usageError{"smol pack create: -o PATH is required"}
	}
	c.CPUs = *cpus
	if *mem != "" {
		if c.Memory, err = smol.ParseSize(*mem); err != nil {
			return usageError{"--mem: " + err.Error()}
		}
	}
	if c.CPUs != 0 || c.Memory != 0 {
		if err := checkShape(max(c.CPUs, 1), max(c.Memory, smol.MinMemory)); err != nil {
			return err
		}
	}
	if *storage != "" {
		s, err := smol.ParseSize(*storage)
		if err != nil {
			return usageError{"--storage: " + err.Error()}
		}
		c.Storage = int64(s)
	}
	if c.Env, err = expandEnv(*env); err != nil {
		return err
	}
	if fs.Changed("entrypoint") {
		c.Entrypoint = strings.Fields(*entrypoint)
	}
	if fs.Changed("cmd") {
		c.Cmd = *cmd
	}
	if c.Net, err = network.config(); err != nil {
		return err
	}
	c.Progress = progressWriter()
	m, err := smol.Pack(context.Background(), c)
	if err != nil {
		return err
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "packed %s (%d sections)\n", c.Output, len(m.Sections))
	}
	return nil
}

func packInspect(args []string) error {
	fs := packFlags("inspect", "FILE [--json]")
	asJSON := fs.Bool("json", false, "print the manifest as JSON")
	files, err := parseArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	r, err := smol.OpenPack(files[0])
	if err != nil {
		return err
	}
	defer r.Close()
	if *asJSON {
		out := struct {
			ID string `json:"id"`
			pack.Manifest
		}{r.ID, r.Manifest}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	m := r.Manifest
	pm := m.Machine
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	// Every string here is the file's: escaped, it cannot drive the
	// terminal.
	fmt.Fprintf(tw, "pack\t%s\n", r.ID[:32])
	fmt.Fprintf(tw, "format\t%q, made by smol %q on %s, created %s\n", m.Format, m.Smol, safe(m.Platform), m.Created.Format("2006-01-02 15:04:05Z07:00"))
	fmt.Fprintf(tw, "image\t%s %s\n", safe(pm.Image), safe(pm.Digest))
	fmt.Fprintf(tw, "machine\t%d vCPUs, %s memory, %s writable layer\n", pm.CPUs, units.FormatSize(int64(pm.Memory)), units.FormatSize(pm.Storage))
	fmt.Fprintf(tw, "command\t%q %q\n", pm.Entrypoint, pm.Cmd)
	fmt.Fprintf(tw, "env\t%q\n", pm.Env)
	fmt.Fprintf(tw, "workdir, user\t%q, %q\n", pm.Workdir, pm.User)
	if n := pm.Net; n != nil {
		fmt.Fprintf(tw, "network\tallow hosts %q, cidrs %q, dns %q\n", n.AllowHosts, n.AllowCIDRs, n.DNS)
	} else {
		fmt.Fprintf(tw, "network\tnone\n")
	}
	for _, s := range m.Sections {
		fmt.Fprintf(tw, "section %s\t%s packed, %s unpacked, sha256 %s\n", s.Name, units.FormatSize(s.Length), units.FormatSize(s.Size), s.SHA256[:16])
	}
	return tw.Flush()
}

// safe quotes a string from a file only when it holds anything but
// printable ASCII.
func safe(s string) string {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

func packVerify(args []string) error {
	fs := packFlags("verify", "FILE")
	files, err := parseArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	r, err := smol.OpenPack(files[0])
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Verify(); err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	fmt.Printf("%s: ok, %d sections, pack %s\n", files[0], len(r.Manifest.Sections), r.ID[:32])
	return nil
}

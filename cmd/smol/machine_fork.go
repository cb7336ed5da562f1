package main

import (
	"context"
	"fmt"

	"github.com/smolvm/smol"
)

// machineVMM is the hidden `smol machine __vmm NAME [--restore PATH
// [--ram-fd N [--ram-overlay-fd N]]] [--ready-fd N]`: the body of a
// machine's VMM process.
func machineVMM(args []string) error {
	err := smol.ServeMachineArgs(args)
	if u, ok := err.(*smol.VMMUsageError); ok {
		return usageError{u.Error()}
	}
	return err
}

func machineSnapshot(args []string) error {
	fs := newFlags("snapshot", "NAME -o PATH [--leave-running]")
	out := fs.StringP("output", "o", "", "the snapshot file to write (must not exist)")
	leave := fs.Bool("leave-running", false, "keep the machine running afterwards (default: it is stopped cleanly)")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *out == "" {
		return usageError{"smol machine snapshot: -o PATH is required"}
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	return m.Snapshot(context.Background(), *out, *leave)
}

func machineRestore(args []string) error {
	fs := newFlags("restore", "PATH --name NEW")
	name := fs.String("name", "", "the new machine's name")
	paths, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *name == "" {
		return usageError{"smol machine restore: --name NEW is required"}
	}
	m, err := smol.Restore(context.Background(), paths[0], *name)
	if err != nil {
		return err
	}
	fmt.Println(m.Name())
	return nil
}

func machineFork(args []string) error {
	fs := newFlags("fork", "NAME [--count N] [--name-prefix P] [--template]")
	count := fs.Int("count", 1, fmt.Sprintf("how many children (1 to %d)", smol.MaxForkChildren))
	prefix := fs.String("name-prefix", "", "name the children P-1 ... P-N (default NAME-fork, numbered after earlier children)")
	template := fs.Bool("template", false, "leave the parent paused as the frozen base of its children (default: it runs on)")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *count < 1 || *count > smol.MaxForkChildren {
		return usageError{fmt.Sprintf("--count %d: want 1 to %d", *count, smol.MaxForkChildren)}
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	children, err := m.Fork(context.Background(), smol.ForkOptions{Count: *count, NamePrefix: *prefix, Template: *template})
	if err != nil {
		return err
	}
	for _, c := range children {
		fmt.Println(c.Name())
	}
	return nil
}

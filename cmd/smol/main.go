// Command smol runs Linux microVMs. It is a thin layer over the smol Go
// package: it parses flags, calls the API and prints.
//
//	smol run [flags] [-- COMMAND ARGS...]
//	smol pull REF
//	smol images [rm REF]
//	smol machine create|start|stop|pause|resume|exec|shell|cp|ls|status|logs|rm ...
//	smol pack create|inspect|verify ...
//
// A copy of it with a pack's trailer (smol pack create) is that pack's
// runner instead: ./PATH run|start|exec|shell|stop|status.
package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/vmm"
	"github.com/spf13/pflag"
)

// processStart approximates when this process was exec'd: package
// initialisation runs right after the Go runtime starts.
var processStart = time.Now()

// usageError is a mistake on the command line: print it and exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usage = `smol runs Linux microVMs.

Usage:
  smol run [flags] [-- CMD ARGS...]   run a command in a microVM (--image REF for an
                                     OCI image), or boot a kernel with its console
  smol pull REF...                   fetch images into the cache
  smol images [rm REF...]            list or remove cached images
  smol machine COMMAND ...           persistent machines: create, start, exec, stop, ls, ...
  smol pack COMMAND ...              portable machines: create, inspect, verify
  smol help                          show this help

Run 'smol run --help' for its flags.
`

func main() {
	vmm.DedicatedProcess = true // `smol run` and a packed machine's stub are their VMs' VMMs
	if exe, s := ownStub(); s != nil && !isVMMCall(os.Args[1:]) {
		os.Exit(stubMain(exe, s, os.Args[1:]))
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	return report(dispatch(args))
}

// report prints err as smol's one line and returns the exit status.
func report(code int, err error) int {
	if err == nil {
		return code
	}
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(os.Stderr, "smol: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func dispatch(args []string) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2, nil
	}
	switch args[0] {
	case "run":
		return runCommand(args[1:])
	case "pull":
		return pullCommand(args[1:])
	case "images":
		return imagesCommand(args[1:])
	case "machine", "pack":
		if exe, err := os.Executable(); err == nil {
			smol.VMMExecutable = exe
		}
		if args[0] == "pack" {
			return packCommand(args[1:])
		}
		return machineCommand(args[1:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0, nil
	}
	return 0, usageError{fmt.Sprintf("unknown command %q (try 'smol help')", args[0])}
}

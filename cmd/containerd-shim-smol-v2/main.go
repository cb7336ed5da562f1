// Command containerd-shim-smol-v2 is containerd's runtime v2 shim for
// smol (runtime io.containerd.smol.v2): every pod, or lone container, is
// a smol machine, and each container's processes run in it, in the
// container's own root. docs/kubernetes.md says how to install it.
//
// The same binary is its machines' VMM process (`machine __vmm NAME`),
// so a host needs nothing but it and containerd.
package main

import (
	"fmt"
	"os"
	"os/signal"

	cshim "github.com/containerd/containerd/runtime/v2/shim"
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/shim"
	"golang.org/x/sys/unix"
)

// unsupportedBuild, when set, says why this build of the binary must not
// run (pluginbuild.go).
var unsupportedBuild string

func main() {
	if unsupportedBuild != "" {
		fmt.Fprintf(os.Stderr, "containerd-shim-smol-v2: %s\n", unsupportedBuild)
		os.Exit(1)
	}
	if len(os.Args) >= 3 && os.Args[1] == "machine" && os.Args[2] == smol.VMMCommand {
		signal.Ignore(unix.SIGHUP, unix.SIGINT, unix.SIGPIPE)
		err := smol.ServeMachineArgs(os.Args[3:])
		if _, usage := err.(*smol.VMMUsageError); usage {
			fmt.Fprintf(os.Stderr, "containerd-shim-smol-v2: %v\n", err)
			os.Exit(2)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "smol: %v\n", err)
			os.Exit(1)
		}
		return
	}
	shim.InheritBoot()
	cshim.Run("io.containerd.smol.v2", shim.New)
}

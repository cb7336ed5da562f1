// Command mkinitramfs builds a small guest initramfs: smol's test init as
// /init, a static busybox for a shell and tools, and an optional /etc/rc that
// init runs (without one, init starts an interactive shell on the console).
//
//	mkinitramfs -o build/initramfs.cpio -init build/init -rc guest/demo/rc
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/smolvm/smol/guest/initramfs"
)

func main() {
	out := flag.String("o", "", "output cpio file")
	initPath := flag.String("init", "", "the init binary (guest/init, built static)")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox")
	rc := flag.String("rc", "", "optional shell script installed as /etc/rc")
	flag.Parse()
	if *out == "" || *initPath == "" {
		fmt.Fprintln(os.Stderr, "usage: mkinitramfs -o OUT -init INIT [-busybox PATH] [-rc SCRIPT]")
		os.Exit(2)
	}
	a := initramfs.New()
	if err := a.AddHostFile("init", *initPath); err != nil {
		fail(err)
	}
	if err := a.AddBusybox(*busybox, initramfs.BusyboxApplets...); err != nil {
		fail(err)
	}
	if *rc != "" {
		if err := a.AddHostFile("etc/rc", *rc); err != nil {
			fail(err)
		}
	}
	if err := a.WriteFile(*out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "mkinitramfs: %v\n", err)
	os.Exit(1)
}

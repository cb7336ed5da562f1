//go:build !cgo

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "smol-gpu: built without cgo; build it with `make gpu` (needs libvirglrenderer-dev)")
	os.Exit(2)
}

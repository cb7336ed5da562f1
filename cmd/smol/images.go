package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/smolvm/smol/imagefs"
	"github.com/spf13/pflag"
)

// pullCommand implements `smol pull REF...`: fill the image cache.
func pullCommand(args []string) (int, error) {
	fs := pflag.NewFlagSet("smol pull", pflag.ContinueOnError)
	insecure := fs.Bool("insecure", false, "allow plain http and unverified TLS for the registry (localhost is always allowed http)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: smol pull [--insecure] REF...\n\nFetch images (registry references, docker-save or OCI-layout tarballs, OCI-layout\ndirectories) into smol's image cache (%s).\n", imagefs.DefaultHome())
	}
	if err := fs.Parse(args); err != nil {
		return 0, flagError(err)
	}
	if fs.NArg() == 0 {
		return 0, usageError{"smol pull needs an image reference"}
	}
	store, err := imagefs.Open(imagefs.DefaultHome())
	if err != nil {
		return 0, err
	}
	for _, ref := range fs.Args() {
		img, err := store.Pull(context.Background(), ref, imagefs.Options{Pull: imagefs.PullAlways, Insecure: *insecure, Progress: progressWriter()})
		if err != nil {
			return 0, err
		}
		fmt.Printf("%s %s\n", img.Digest, ref)
	}
	return 0, nil
}

// imagesCommand implements `smol images` (list the cache) and
// `smol images rm REF...`.
func imagesCommand(args []string) (int, error) {
	if len(args) > 0 && args[0] == "rm" {
		if len(args) == 1 {
			return 0, usageError{"smol images rm needs an image reference or digest"}
		}
		store, err := imagefs.Open(imagefs.DefaultHome())
		if err != nil {
			return 0, err
		}
		for _, ref := range args[1:] {
			if err := store.Remove(ref); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	fs := pflag.NewFlagSet("smol images", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, "Usage: smol images       list cached images\n       smol images rm REF...  remove cached images (by reference or digest)\n")
	}
	if err := fs.Parse(args); err != nil {
		return 0, flagError(err)
	}
	if fs.NArg() > 0 {
		return 0, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	store, err := imagefs.Open(imagefs.DefaultHome())
	if err != nil {
		return 0, err
	}
	images, err := store.List()
	if err != nil {
		return 0, err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REFERENCE\tDIGEST\tSIZE\tCACHED")
	for _, img := range images {
		digest := img.Digest
		if len(digest) > 19 {
			digest = digest[:19]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", img.Ref, digest, humanize.IBytes(uint64(img.Size)), humanize.Time(img.Created))
	}
	return 0, tw.Flush()
}

func flagError(err error) error {
	if err == pflag.ErrHelp {
		return err
	}
	return usageError{err.Error()}
}

// Command image measures smol's two image targets against peers run in the
// same session:
//
//   - run: a cached image, `smol run --image X -- true`, from exec to exit,
//     against a bare `smol run --kernel K --initrd I` whose init powers off
//     at once (the cost of the image, the agent and the command on top of
//     a boot). Target: ratio <= 1.3.
//   - unpack: pulling a ~100 MiB image from a docker-save tarball into its
//     cached ext4 image (`smol pull`), against the same layers extracted
//     with tar and made into ext4 with mke2fs -d (what a shell script
//     would do). Target: <= 2 s.
//
// A run phase round whose guest dies or hangs (its agent never answers, or
// smol runs past -timeout) is reported and replaced by another, a bounded
// number of times, instead of ending the bench.
//
// Run the run phase where /dev/kvm boots Linux (make bench-image runs it in
// the test box); the unpack phase needs no KVM.
package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/guest/initramfs"
	"github.com/smolvm/smol/internal/imagetest"
)

func main() {
	n := flag.Int("n", 5, "runs of each kind")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel")
	initPath := flag.String("init", "build/init", "the test init, for the bare boot")
	only := flag.String("only", "", "run only this phase: run or unpack")
	timeout := flag.Duration("timeout", 4*time.Minute, "a guest run that has not ended by then is hung (smol itself gives up on an agent after 2 minutes)")
	flag.Parse()

	work, err := os.MkdirTemp("", "smol-bench-image-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	smolPath, err := filepath.Abs(*smolBin)
	if err != nil {
		fatal(err)
	}
	if *only == "" || *only == "unpack" {
		benchUnpack(work, smolPath, *n)
	}
	if *only == "" || *only == "run" {
		benchRun(work, smolPath, *kernel, *initPath, *n, *timeout)
	}
}

// benchRun times a cached image run against a bare boot-and-poweroff.
func benchRun(work, smolBin, kernel, initPath string, n int, timeout time.Duration) {
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		fatal(err)
	}
	small := filepath.Join(work, "busybox-image.tar")
	if err := writeImage(small, []entry{{"bin/busybox", busybox, 0o755}}, []string{"true", "sh"}); err != nil {
		fatal(err)
	}
	home := filepath.Join(work, "home-run")
	mustRun(smolBin, home, "pull", small)

	a := initramfs.New()
	if err := a.AddHostFile("init", initPath); err != nil {
		fatal(err)
	}
	if err := a.AddBusybox("/bin/busybox", "sh", "true"); err != nil {
		fatal(err)
	}
	a.AddFile("etc/rc", []byte("true\n"), 0o755)
	bareInitrd := filepath.Join(work, "bare.cpio")
	if err := a.WriteFile(bareInitrd); err != nil {
		fatal(err)
	}
	common := []string{"--cpus", "1", "--mem", "256M"}
	image := append(append([]string{"run"}, common...), "--pull", "never", "--image", small, "--", "true")
	bare := append(append([]string{"run"}, common...), "--kernel", kernel, "--initrd", bareInitrd)
	var imageTimes, bareTimes []time.Duration
	// A guest that dies or hangs (it happens in the test box, a few
	// percent of boots) costs its round, which another replaces.
	res := rounds.Run(n, max(3, n/2), func(round int) error {
		b, err := guestRun("bare boot", smolBin, home, timeout, bare...)
		if err != nil {
			return err
		}
		i, err := guestRun("image run", smolBin, home, timeout, image...)
		if err != nil {
			return err
		}
		bareTimes, imageTimes = append(bareTimes, b), append(imageTimes, i)
		fmt.Printf("round %d: bare %v, image %v\n", round, b.Round(time.Millisecond), i.Round(time.Millisecond))
		return nil
	}, func(format string, args ...any) { fmt.Printf("bench-image: "+format+"\n", args...) })
	fmt.Printf("rounds: %s\n", res.Summary(n))
	if res.Done == 0 {
		fatal(fmt.Errorf("no round completed"))
	}
	mi, mb := median(imageTimes), median(bareTimes)
	fmt.Printf("cached image run median: image %.0f ms, bare boot %.0f ms, ratio %.2f (target <= 1.3)\n",
		ms(mi), ms(mb), float64(mi)/float64(mb))
}

// guestRun runs smol once to its end and returns how long it took; a smol
// that fails (its guest died, or its agent never answered) or that runs
// past timeout is a *rounds.GuestError.
func guestRun(what, smolBin, home string, timeout time.Duration, args ...string) (time.Duration, error) {
	cmd := exec.Command(smolBin, args...)
	cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
	start := time.Now()
	err := rounds.Command(what, cmd, timeout, nil)
	return time.Since(start), err
}

// benchUnpack times `smol pull` of a ~100 MiB image tarball against tar
// plus mke2fs -d on the same content.
func benchUnpack(work, smolBin string, n int) {
	var entries []entry
	var total int
	for i := 0; total < 100<<20; i++ {
		size := 4 << 10 << (i % 10) // 4 KiB .. 2 MiB, mixed
		data := make([]byte, size)
		rand.Read(data[:size/2]) // half random: a layer that compresses a little
		entries = append(entries, entry{fmt.Sprintf("data/d%02d/f%05d", i%50, i), data, 0o644})
		total += size
	}
	big := filepath.Join(work, "big-image.tar")
	if err := writeImage(big, entries, []string{"true"}); err != nil {
		fatal(err)
	}
	fmt.Printf("unpack: %d files, %d MiB\n", len(entries), total>>20)
	var smolTimes, peerTimes []time.Duration
	for i := 0; i < n; i++ {
		home := filepath.Join(work, fmt.Sprintf("home-unpack-%d", i))
		smolTimes = append(smolTimes, timed(smolBin, home, "pull", big))
		os.RemoveAll(home)
		peerTimes = append(peerTimes, peerUnpack(work, entries))
		fmt.Printf("round %d: smol pull %v, tar+mke2fs %v\n", i+1, smolTimes[i].Round(time.Millisecond), peerTimes[i].Round(time.Millisecond))
	}
	ms1, mp := median(smolTimes), median(peerTimes)
	fmt.Printf("unpack 100 MiB median: smol %.0f ms, tar+mke2fs %.0f ms, ratio %.2f (target: smol <= 2000 ms)\n",
		ms(ms1), ms(mp), float64(ms1)/float64(mp))
}

// peerUnpack extracts the layer with tar and builds ext4 with mke2fs -d.
func peerUnpack(work string, entries []entry) time.Duration {
	layerTar := filepath.Join(work, "peer-layer.tar")
	if _, err := os.Stat(layerTar); err != nil {
		data, err := imagetest.Tar(tarEntries(entries)...)
		if err != nil {
			fatal(err)
		}
		if err := os.WriteFile(layerTar, data, 0o644); err != nil {
			fatal(err)
		}
	}
	root := filepath.Join(work, "peer-root")
	img := filepath.Join(work, "peer.ext4")
	defer os.RemoveAll(root)
	defer os.Remove(img)
	start := time.Now()
	os.MkdirAll(root, 0o755)
	if out, err := exec.Command("tar", "-xf", layerTar, "-C", root).CombinedOutput(); err != nil {
		fatal(fmt.Errorf("tar: %v: %s", err, out))
	}
	if out, err := exec.Command("mke2fs", "-q", "-t", "ext4", "-d", root, img, "200M").CombinedOutput(); err != nil {
		fatal(fmt.Errorf("mke2fs: %v: %s", err, out))
	}
	return time.Since(start)
}

type entry struct {
	name string
	data []byte
	mode int64
}

// writeImage writes a docker-save tarball of a one-layer image.
func writeImage(path string, entries []entry, cmd []string) error {
	layer, err := imagetest.Layer(tarEntries(entries)...)
	if err != nil {
		return err
	}
	img, err := imagetest.Image("amd64", v1.Config{Cmd: cmd, Env: []string{"PATH=/bin"}}, layer)
	if err != nil {
		return err
	}
	tag, err := name.NewTag("bench/image:latest")
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// tarEntries is the layer for entries: their directories first, the
// files, and sh/true links next to a busybox.
func tarEntries(entries []entry) []imagetest.Entry {
	dirs := map[string]bool{}
	for _, e := range entries {
		for d := filepath.Dir(e.name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var out []imagetest.Entry
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		out = append(out, imagetest.Dir(d+"/"))
	}
	for _, e := range entries {
		f := imagetest.File(e.name, string(e.data))
		f.Mode = e.mode
		out = append(out, f)
		if e.name == "bin/busybox" {
			out = append(out, imagetest.Symlink("bin/sh", "busybox"), imagetest.Symlink("bin/true", "busybox"))
		}
	}
	return out
}

func timed(smolBin, home string, args ...string) time.Duration {
	start := time.Now()
	mustRun(smolBin, home, args...)
	return time.Since(start)
}

func mustRun(smolBin, home string, args ...string) {
	cmd := exec.Command(smolBin, args...)
	cmd.Env = append(os.Environ(), "SMOL_HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		fatal(fmt.Errorf("smol %v: %v\n%s", args, err, out))
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench-image: %v\n", err)
	os.Exit(1)
}

// Command pack measures portable machines against peers run in the same
// session, and prints the ratios:
//
//   - size: the root section of `smol pack create --image` of a ~500 MiB
//     image against `zstd -3` of the same root filesystem (the cached
//     ext4 file; its holes and free blocks are zeros, which zstd reduces to
//     almost nothing, so this is zstd of the used blocks). Target ≤ 1.1.
//   - pack time of that image (the whole `smol pack create`, kernel and
//     agent included), with `zstd -3` of the root beside it. Target ≤ 10 s.
//   - start (-only start, needs a guest: the box): `smol machine create
//     --from PACK` + `start` + the first `exec -- true`, against `create
//     --image` of the same cached image + `start` + `exec`. Target ≤ 1.2.
//     The first machine of a pack unpacks its shared sections; later ones
//     reuse them: both are reported.
//
// make bench-pack runs the size and time phase here and the start phase
// in the test box.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol/bench/internal/benchimage"
	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/bench/internal/stats"
	"github.com/smolvm/smol/internal/imagetest"
)

func main() {
	n := flag.Int("n", 5, "runs of each kind")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	only := flag.String("only", "", "run only this phase: size or start")
	mib := flag.Int("mib", 500, "size of the packed image's files, MiB")
	flag.Parse()
	bin, err := filepath.Abs(*smolBin)
	if err != nil {
		fatal(err)
	}
	work, err := os.MkdirTemp("", "smol-bench-pack-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	if *only == "" || *only == "size" {
		benchSize(work, bin, *n, *mib)
	}
	if *only == "" || *only == "start" {
		benchStart(work, bin, *n)
	}
}

// benchSize packs a big image n times and compares size and time with
// zstd -3.
func benchSize(work, bin string, n, mib int) {
	img := filepath.Join(work, "big.tar")
	if err := bigImage(img, work, mib); err != nil {
		fatal(err)
	}
	home := filepath.Join(work, "home-size")
	s := smol{bin: bin, home: home}
	s.must("pull", img)
	disk := s.cachedDisk()
	fi, _ := os.Stat(disk)
	fmt.Printf("size: an image of %d MiB of files, its root filesystem %d MiB (sparse file)\n", mib, fi.Size()>>20)
	var packMs, zstdMs []float64
	var rootLen, zstdLen int64
	for i := 0; i < n; i++ {
		out := filepath.Join(work, fmt.Sprintf("p%d", i))
		start := time.Now()
		s.must("pack", "create", "--image", img, "-o", out)
		packMs = append(packMs, msSince(start))
		rootLen = s.rootSection(out + ".smolmachine")
		os.Remove(out)
		os.Remove(out + ".smolmachine")

		start = time.Now()
		z := exec.Command("zstd", "-3", "-T1", "-q", "-c", disk)
		var zb countWriter
		z.Stdout = &zb
		if err := z.Run(); err != nil {
			fatal(fmt.Errorf("zstd: %v", err))
		}
		zstdMs, zstdLen = append(zstdMs, msSince(start)), zb.n
		fmt.Printf("round %d: smol pack create %.0f ms (root section %.1f MiB), zstd -3 of the root %.0f ms (%.1f MiB)\n",
			i+1, packMs[i], float64(rootLen)/(1<<20), zstdMs[i], float64(zstdLen)/(1<<20))
	}
	fmt.Printf("pack size: root section %.1f MiB, zstd -3 %.1f MiB: ratio %.3f (target <= 1.1)\n",
		float64(rootLen)/(1<<20), float64(zstdLen)/(1<<20), float64(rootLen)/float64(zstdLen))
	fmt.Printf("pack time median: smol pack create %.0f ms (target <= 10000 for 500 MiB), zstd -3 of the root %.0f ms: ratio %.2f\n",
		stats.Median(packMs), stats.Median(zstdMs), stats.Median(packMs)/stats.Median(zstdMs))
}

// benchStart compares a machine made from a pack with one made from the
// cached image, from create to the first exec's end.
func benchStart(work, bin string, n int) {
	img := filepath.Join(work, "busybox.tar")
	if err := benchimage.Busybox(img); err != nil {
		fatal(err)
	}
	s := smol{bin: bin, home: filepath.Join(work, "home-start")}
	s.must("pull", img)
	shape := []string{"--cpus", "1", "--mem", "512M", "--storage", "2G"}
	s.must(append([]string{"machine", "create", "proto", "--image", img}, shape...)...)
	s.must("machine", "start", "proto")
	s.must("machine", "exec", "proto", "--", "sh", "-c", "echo state > /root/state; sync")
	s.must("machine", "stop", "proto")
	packed := filepath.Join(work, "proto")
	s.must("pack", "create", "--from-machine", "proto", "-o", packed)

	// The first machine of the pack unpacks its shared sections.
	first, err := s.toExec("first", "--from", packed+".smolmachine")
	if err != nil {
		fatal(err)
	}
	fmt.Printf("first machine of the pack (unpacks kernel, agent, root): create --from + start + exec %.0f ms\n", first)
	var fromPack, fromImage []float64
	logf := func(format string, args ...any) { fmt.Printf("bench-pack: "+format+"\n", args...) }
	res := rounds.Run(n, 3, func(i int) error {
		p, err := s.toExec(fmt.Sprintf("p%d", i), "--from", packed+".smolmachine")
		if err != nil {
			return err
		}
		m, err := s.toExec(fmt.Sprintf("m%d", i), append([]string{"--image", img}, shape...)...)
		if err != nil {
			return err
		}
		fromPack, fromImage = append(fromPack, p), append(fromImage, m)
		fmt.Printf("round %d: from the pack %.0f ms, from the cached image %.0f ms\n", i, p, m)
		return nil
	}, logf)
	fmt.Printf("start rounds: %s\n", res.Summary(n))
	fmt.Printf("create --from + start + first exec median %.0f ms, from the cached image %.0f ms: ratio %.2f (target <= 1.2)\n",
		stats.Median(fromPack), stats.Median(fromImage), stats.Median(fromPack)/stats.Median(fromImage))
}

type smol struct{ bin, home string }

func (s smol) cmd(args ...string) *exec.Cmd {
	c := exec.Command(s.bin, args...)
	c.Env = append(os.Environ(), "SMOL_HOME="+s.home)
	return c
}

func (s smol) must(args ...string) string {
	out, err := s.cmd(args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		fatal(fmt.Errorf("smol %s: %v: %s", strings.Join(args, " "), err, stderr))
	}
	return string(out)
}

// toExec creates machine name with args, starts it and runs one exec,
// timed from the create to the exec's end; the machine is removed after.
func (s smol) toExec(name string, args ...string) (float64, error) {
	defer s.cmd("machine", "rm", "-f", name).Run()
	start := time.Now()
	for _, step := range [][]string{
		append([]string{"machine", "create", name}, args...),
		{"machine", "start", name},
		{"machine", "exec", name, "--", "true"},
	} {
		var errb bytes.Buffer
		c := s.cmd(step...)
		c.Stderr = &errb
		if err := c.Run(); err != nil {
			return 0, fmt.Errorf("smol %s: %v: %s", strings.Join(step, " "), err, strings.TrimSpace(errb.String()))
		}
	}
	return msSince(start), nil
}

// cachedDisk is the one cached image's ext4 file.
func (s smol) cachedDisk() string {
	var found string
	filepath.Walk(filepath.Join(s.home, "images"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.HasSuffix(p, ".ext4") {
			found = p
		}
		return nil
	})
	if found == "" {
		fatal(fmt.Errorf("no cached ext4 image under %s", s.home))
	}
	return found
}

// rootSection is the compressed length of a pack's root section.
func (s smol) rootSection(path string) int64 {
	var m struct {
		Sections []struct {
			Name   string
			Length int64
		}
	}
	if err := json.Unmarshal([]byte(s.must("pack", "inspect", "--json", path)), &m); err != nil {
		fatal(err)
	}
	for _, sec := range m.Sections {
		if sec.Name == "root" {
			return sec.Length
		}
	}
	fatal(fmt.Errorf("%s has no root section", path))
	return 0
}

// bigImage writes an image of about mib MiB of files: half random (as
// binaries and compressed assets are), half text-like (as sources and
// scripts are), from 4 KiB to 2 MiB each.
func bigImage(out, work string, mib int) error {
	layerPath := filepath.Join(work, "layer.tar")
	f, err := os.Create(layerPath)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	words := []byte("func main() { fmt.Println(\"hello\") } // the quick brown fox jumps over the lazy dog\n")
	total := 0
	for i := 0; total < mib<<20; i++ {
		size := 4 << 10 << (i % 10)
		data := make([]byte, size)
		if i%2 == 0 {
			rand.Read(data)
		} else {
			for k := 0; k < size; k += len(words) {
				copy(data[k:], words)
				if k+8 < size {
					rand.Read(data[k : k+2]) // not one repeated line
				}
			}
		}
		hdr := &tar.Header{Name: fmt.Sprintf("data/d%02d/f%05d", i%50, i), Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
		total += size
	}
	if err := tw.Close(); err != nil {
		return err
	}
	f.Close()
	layer, err := tarball.LayerFromFile(layerPath)
	if err != nil {
		return err
	}
	img, err := imagetest.Image("amd64", v1.Config{Cmd: []string{"true"}}, layer)
	if err != nil {
		return err
	}
	tag, _ := name.NewTag("bench/big:1")
	return tarball.WriteToFile(out, tag, img)
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

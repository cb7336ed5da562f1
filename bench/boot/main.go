// Command boot compares how fast smol and QEMU's microvm machine boot the
// same kernel and initramfs to the guest's init, with the same memory and
// vCPUs, alternating runs in one session. It prints each run and ends with
//
//	boot-to-init median: smol <ms> ms, qemu-microvm <ms> ms, ratio <smol/qemu>
//
// "Boot to init" is measured from the moment the VMM process is started to
// the moment a line printed by the guest's init appears on its console: the
// same observable event for both VMMs, with no cooperation from either.
// It also reports smol's own view (--boot-time) and its resident memory
// outside guest RAM.
//
// Run it where /dev/kvm can boot Linux; on this project's machines that is
// the test box: make bench-boot.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/guest/initramfs"
)

const marker = "smol-bench-init-reached"

func main() {
	n := flag.Int("n", 10, "boots per VMM")
	kernel := flag.String("kernel", "build/vmlinux", "guest kernel (vmlinux with a PVH note; QEMU needs one)")
	initPath := flag.String("init", "build/init", "guest init binary")
	smolBin := flag.String("smol", "bin/smol", "smol binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	cpus := flag.Int("cpus", 1, "vCPUs")
	mem := flag.String("mem", "256M", "guest memory")
	flag.Parse()

	initrd, err := benchInitramfs(*initPath)
	if err != nil {
		fatal(err)
	}
	defer os.Remove(initrd)
	memBytes, err := smol.ParseSize(*mem)
	if err != nil {
		fatal(err)
	}
	memMiB := strconv.FormatUint(memBytes>>20, 10)
	cmdline := smol.DefaultCmdline
	smolArgs := []string{"run", "--kernel", *kernel, "--initrd", initrd, "--cpus", strconv.Itoa(*cpus), "--mem", *mem, "--boot-time"}
	qemuArgs := []string{
		"-M", "microvm", "-enable-kvm", "-cpu", "host", "-smp", strconv.Itoa(*cpus), "-m", memMiB,
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-kernel", *kernel, "-initrd", initrd, "-append", cmdline,
	}
	fmt.Printf("boot bench: kernel %s, %d vCPU, %s, %d runs each, cmdline %q\n", *kernel, *cpus, *mem, *n, cmdline)

	var smolMs, qemuMs, startMs, rssMiB []float64
	for i := 0; i < *n; i++ {
		r, err := bootOnce(*smolBin, smolArgs, true)
		if err != nil {
			fatal(fmt.Errorf("smol run %d: %w", i, err))
		}
		q, err := bootOnce(*qemuBin, qemuArgs, false)
		if err != nil {
			fatal(fmt.Errorf("qemu run %d: %w", i, err))
		}
		smolMs, qemuMs = append(smolMs, r.initMs), append(qemuMs, q.initMs)
		if r.firstRunMs > 0 {
			startMs = append(startMs, r.firstRunMs)
		}
		rssMiB = append(rssMiB, r.rssMiB)
		fmt.Printf("run %2d: smol %7.1f ms (first KVM_RUN %.1f ms, VMM RSS %.1f MiB)   qemu-microvm %7.1f ms\n", i+1, r.initMs, r.firstRunMs, r.rssMiB, q.initMs)
	}
	fmt.Printf("smol exec to first KVM_RUN median: %.1f ms\n", median(startMs))
	fmt.Printf("smol VMM resident memory outside guest RAM, median: %.1f MiB\n", median(rssMiB))
	if err := memoryCost(*smolBin, *kernel, *initPath); err != nil {
		fatal(err)
	}
	s, q := median(smolMs), median(qemuMs)
	fmt.Printf("boot-to-init median: smol %.1f ms, qemu-microvm %.1f ms, ratio %.2f\n", s, q, s/q)
}

// memoryCost boots an 8 GiB guest twice, idle and after writing 100 MiB to
// a RAM-backed file, and reports the host memory (all of smol's resident
// memory, guest RAM included) at the end of each: memory is taken only as
// the guest touches it.
func memoryCost(smolBin, kernel, initPath string) error {
	rss := map[string]float64{}
	for _, c := range []struct{ name, rc string }{
		{"idle", "echo " + marker + "\nsleep 1\npoweroff -f\n"},
		{"touched", "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>/dev/null\necho " + marker + "\nsleep 1\npoweroff -f\n"},
	} {
		initrd, err := writeInitramfs(initPath, c.rc)
		if err != nil {
			return err
		}
		r, err := bootOnce(smolBin, []string{"run", "--kernel", kernel, "--initrd", initrd, "--cpus", "1", "--mem", "8G"}, true)
		os.Remove(initrd)
		if err != nil {
			return fmt.Errorf("8 GiB guest (%s): %w", c.name, err)
		}
		rss[c.name] = r.totalRSSMiB
	}
	fmt.Printf("8 GiB guest, host memory: idle %.0f MiB, after touching 100 MiB %.0f MiB (+%.0f MiB)\n",
		rss["idle"], rss["touched"], rss["touched"]-rss["idle"])
	return nil
}

type result struct {
	initMs      float64 // exec to the init's console line
	firstRunMs  float64 // smol only: exec to first KVM_RUN, from --boot-time
	rssMiB      float64 // smol only: VmRSS minus shared memory (guest RAM) at init
	totalRSSMiB float64 // smol only: VmRSS at init, guest RAM included
}

var bootTimeLine = regexp.MustCompile(`first KVM_RUN ([0-9.]+) ms`)

func bootOnce(bin string, args []string, isSmol bool) (result, error) {
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	var r result
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), marker) {
				r.initMs = float64(time.Since(start).Microseconds()) / 1000
				if isSmol {
					r.rssMiB, r.totalRSSMiB = residentMiB(cmd.Process.Pid)
				}
				ok = true
				found <- true
			}
		}
		if !ok {
			found <- false
		}
		io.Copy(io.Discard, stdout)
	}()
	timeout := time.AfterFunc(5*time.Minute, func() { cmd.Process.Kill() })
	defer timeout.Stop()
	ok := <-found
	err = cmd.Wait()
	if !ok {
		return r, fmt.Errorf("the guest's init never printed %q (%v): %s", marker, err, stderr.String())
	}
	if m := bootTimeLine.FindStringSubmatch(stderr.String()); m != nil {
		r.firstRunMs, _ = strconv.ParseFloat(m[1], 64)
	}
	return r, nil
}

// residentMiB returns the process's resident memory without and with its
// resident shared memory: guest RAM is a shared memfd mapping, so the first
// is the VMM itself and the second what the whole VM costs the host.
func residentMiB(pid int) (vmm, total float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	var rss, shmem float64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "RssShmem:":
			shmem = v
		}
	}
	return (rss - shmem) / 1024, rss / 1024
}

func benchInitramfs(initPath string) (string, error) {
	return writeInitramfs(initPath, "echo "+marker+"\npoweroff -f\n")
}

// writeInitramfs builds a guest with busybox whose init runs rc.
func writeInitramfs(initPath, rc string) (string, error) {
	a := initramfs.New()
	if err := a.AddHostFile("init", initPath); err != nil {
		return "", err
	}
	if err := a.AddBusybox("/bin/busybox", initramfs.BusyboxApplets...); err != nil {
		return "", err
	}
	a.AddFile("etc/rc", []byte(rc), 0o755)
	f, err := os.CreateTemp("", "smol-bench-*.cpio")
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), a.WriteFile(f.Name())
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

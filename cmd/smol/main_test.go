package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/vmm/boot"
)

// These run on any host: every check here happens before KVM is touched.
func TestRunRejectsBadInputBeforeKVM(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	cases := []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"--mem", "lots"}, true, "not a size"},
		{[]string{"--gpu=3d", "--", "true"}, true, "--gpu=3d: unknown mode"},
		{[]string{"--gpu", "--gpu-size", "big", "--", "true"}, true, "not WIDTHxHEIGHT"},
		{[]string{"--gpu", "--gpu-size", "100x100", "--", "true"}, true, "display size 100x100"},
		{[]string{"--gpu", "--gpu-size", "99999999999x1", "--", "true"}, true, "not WIDTHxHEIGHT"},
		{[]string{"--gpu-size", "800x600", "--", "true"}, true, "--gpu-size needs --gpu"},
		{[]string{"--cpus", "0"}, true, "--cpus 0"},
		{[]string{"--tty"}, true, "--tty needs --image or a command"},
		{[]string{"--exit-stats", "--", "true"}, true, "--exit-stats cannot be used"},
		{[]string{"--pull", "sometimes", "--", "true"}, true, "--pull"},
		{[]string{"-e", "=x", "--", "true"}, true, "KEY=VALUE"},
		{[]string{"--kernel", filepath.Join(dir, "missing")}, false, "no such file"},
		{[]string{"--kernel", text}, false, "not a Linux kernel"},
		{[]string{"--kernel", dir}, false, "not a regular file"},
		{[]string{"--cpus", "300"}, true, "--cpus 300"},
		{[]string{"--mem", "16M"}, true, "--mem 16M is too small"},
		{[]string{"--irqchip", "userspace"}, true, "--irqchip: irqchip \"userspace\""},
		{[]string{"--allow-host", "bad name", "--", "true"}, true, "--allow-host"},
		{[]string{"--allow-host", "a.test:0", "--", "true"}, true, "port"},
		{[]string{"--allow-host", "a.test", "--allow-host", "A.test", "--", "true"}, true, "given twice"},
		{[]string{"--allow-cidr", "10.0.0.0/33", "--", "true"}, true, "--allow-cidr"},
		{[]string{"--allow-cidr", "10.0.0.0/8:70000", "--", "true"}, true, "port"},
		{[]string{"-p", "0:80", "--", "true"}, true, "-p"},
		{[]string{"-p", "8080:80", "-p", "127.0.0.1:8080:80", "--", "true"}, true, "published twice"},
		{[]string{"-p", "8080:80/sctp", "--", "true"}, true, "protocol"},
		{[]string{"--dns", "resolver.example", "--", "true"}, true, "--dns"},
		{[]string{"--net", "--net-tap", "tap0", "--", "true"}, true, "--net-tap cannot be used"},
		{[]string{"--egress-log", filepath.Join(dir, "e.log"), "--", "true"}, true, "--egress-log needs --net"},
	}
	for _, c := range cases {
		_, err := runCommand(c.args)
		if err == nil {
			t.Errorf("smol run %v succeeded", c.args)
			continue
		}
		var ue usageError
		if errors.As(err, &ue) != c.usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("smol run %v: %v (usage error %v), want %q", c.args, err, errors.As(err, &ue), c.want)
		}
	}
	if _, err := runCommand([]string{"--kernel", text}); !errors.Is(err, boot.ErrNotKernel) {
		t.Errorf("text kernel error %v is not boot.ErrNotKernel", err)
	}
}

// --gpu=virgl without its helper is one line saying how to build it,
// before anything is pulled or booted.
func TestRunVirglNeedsTheHelper(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	t.Setenv("SMOL_GPU_HELPER", "")
	if _, err := runCommand([]string{"--gpu=virgl", "--", "true"}); err == nil || !strings.Contains(err.Error(), "make gpu") {
		t.Errorf("--gpu=virgl with no smol-gpu anywhere: %v, want how to build it", err)
	}
	text := filepath.Join(dir, "smol-gpu")
	os.WriteFile(text, []byte("not a program"), 0o644)
	t.Setenv("SMOL_GPU_HELPER", text)
	if _, err := runCommand([]string{"--gpu=virgl", "--", "true"}); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("SMOL_GPU_HELPER naming a text file: %v", err)
	}
}

func TestEscapeReader(t *testing.T) {
	cases := []struct {
		in, out string
		escaped bool
	}{
		{"hello", "hello", false},
		{"a\x01xb", "ab", true},
		{"\x01\x01", "\x01", false},
		{"\x01y", "\x01y", false},
	}
	for _, c := range cases {
		esc := make(chan struct{})
		r := &escapeReader{r: strings.NewReader(c.in), escape: esc}
		var out bytes.Buffer
		buf := make([]byte, 3) // small reads exercise the held-back Ctrl-A
		for {
			n, err := r.Read(buf)
			out.Write(buf[:n])
			if err == io.EOF {
				break
			}
		}
		escaped := false
		select {
		case <-esc:
			escaped = true
		default:
		}
		if out.String() != c.out || escaped != c.escaped {
			t.Errorf("%q -> %q escaped=%v, want %q escaped=%v", c.in, out.String(), escaped, c.out, c.escaped)
		}
	}
}

// TestMachineCreateRejectsABadIRQChip: the flag is checked before the
// machine is recorded.
func TestMachineCreateRejectsABadIRQChip(t *testing.T) {
	t.Setenv("SMOL_HOME", t.TempDir())
	err := machineCreate([]string{"m", "--irqchip", "userspace"})
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `--irqchip: irqchip "userspace"`) {
		t.Fatalf("machine create --irqchip userspace: %v, want a usage error naming the flag", err)
	}
	if _, err := smol.OpenMachine("m"); err == nil {
		t.Error("the refused machine was recorded")
	}
}

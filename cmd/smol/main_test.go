package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		{[]string{"--cpus", "0"}, true, "--cpus 0"},
		{[]string{"--tty"}, true, "--tty needs --image or a command"},
		{[]string{"--exit-stats", "--", "true"}, true, "--exit-stats cannot be used"},
		{[]string{"--pull", "sometimes", "--", "true"}, true, "--pull"},
		{[]string{"-e", "=x", "--", "true"}, true, "KEY=VALUE"},
		{[]string{"--kernel", filepath.Join(dir, "missing")}, false, "no such file"},
		{[]string{"--kernel", text}, false, "not a Linux kernel"},
		{[]string{"--kernel", dir}, false, "not a regular file"},
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

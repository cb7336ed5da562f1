package integration

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// browser is a headless Chromium driven through ChromeDriver's W3C
// WebDriver API (plain HTTP and JSON), as a user's browser would be.
type browser struct {
	t       *testing.T
	base    string // http://127.0.0.1:PORT/session/ID
	driver  *exec.Cmd
	timeout time.Duration
}

// startBrowser starts chromedriver and a headless Chromium session with a
// window of width x height CSS pixels at a device scale of 1, so that a
// page screenshot has one pixel per image pixel.
func startBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	path, err := exec.LookPath("chromedriver")
	if err != nil {
		t.Fatal("chromedriver is not installed (scripts/install-deps.sh installs chromium and chromium-driver)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// Chromium needs a home and a profile directory it can write (the box
	// gives a test neither).
	profile := t.TempDir()
	cmd := exec.Command(path, fmt.Sprintf("--port=%d", port))
	cmd.Env = append(os.Environ(), "HOME="+profile)
	// A process group of its own, so that no Chromium process outlives the
	// test: one left polling the page would slow every later test in the
	// box.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, driver: cmd, timeout: 5 * time.Minute}
	t.Cleanup(func() {
		if b.base != "" {
			req, _ := http.NewRequest(http.MethodDelete, b.base, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := http.Get(root + "/status")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": "/usr/bin/chromium",
			"args": []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
				fmt.Sprintf("--window-size=%d,%d", width, height), "--force-device-scale-factor=1", "--force-color-profile=srgb",
				"--hide-scrollbars", "--user-data-dir=" + filepath.Join(profile, "chromium")},
		},
	}}}
	var session struct {
		SessionID string `json:"sessionId"`
	}
	b.base = root + "/session"
	b.call(http.MethodPost, "", caps, &session)
	b.base = root + "/session/" + session.SessionID
	return b
}

// call makes one WebDriver request and decodes its "value".
func (b *browser) call(method, path string, body, out any) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: b.timeout}
	resp, err := client.Do(req)
	if err != nil {
		b.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("webdriver %s %s: %s: %s", method, path, resp.Status, raw)
	}
	if out != nil {
		var v struct {
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			b.t.Fatalf("webdriver %s %s: %v", method, path, err)
		}
		if err := json.Unmarshal(v.Value, out); err != nil {
			b.t.Fatalf("webdriver %s %s: %v in %s", method, path, err, v.Value)
		}
	}
}

func (b *browser) open(url string) {
	b.call(http.MethodPost, "/url", map[string]string{"url": url}, nil)
}

// screenshot returns the PNG of the viewport.
func (b *browser) screenshot() []byte {
	var s string
	b.call(http.MethodGet, "/screenshot", nil, &s)
	png, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}

// typeKeys presses and releases each key in turn (WebDriver key values:
// characters, or "\uE006" for Return, the main Enter key).
func (b *browser) typeKeys(keys ...string) {
	var actions []map[string]string
	for _, k := range keys {
		actions = append(actions, map[string]string{"type": "keyDown", "value": k}, map[string]string{"type": "keyUp", "value": k})
	}
	b.call(http.MethodPost, "/actions", map[string]any{"actions": []any{map[string]any{"type": "key", "id": "keyboard", "actions": actions}}}, nil)
}

// firstLine starts cmd and returns the first line of its stdout.
func firstLine(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		return l
	case <-time.After(time.Minute):
		t.Fatalf("%v printed nothing", cmd.Args)
		return ""
	}
}

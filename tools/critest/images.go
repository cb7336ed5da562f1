package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol/internal/containerdtest"
	"github.com/smolvm/smol/internal/imagetest"
)

// The suite's users and groups (cri-tools pkg/validate/consts.go): the
// images run as these, and its specs check the ids they see.
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\n" +
		"www-data:x:33:33:www-data:/var/www:/bin/sh\n" +
		"default-user:x:1000:1000:default-user:/home/default-user:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
	group = "root:x:0:\nwww-data:x:33:\ndefault-user:x:1000:\n" +
		"group-defined-in-image:x:50000:default-user\nnogroup:x:65534:\n"
	webPage = "<html><body><h1>Welcome to nginx!</h1></body></html>\n"
)

// suiteImage is one image the suite pulls, by its path behind the
// registry prefix, and how it differs from the plain busybox root.
type suiteImage struct {
	path   string
	config v1.Config
}

func suiteImages() []suiteImage {
	web := v1.Config{Entrypoint: []string{"/bin/httpd", "-f", "-p", "80", "-h", "/www"}}
	staging := "k8s-staging-cri-tools/"
	images := []suiteImage{
		{path: "e2e-test-images/busybox:1.29-2"},
		{path: "e2e-test-images/nginx:1.14-2", config: web},
		{path: "e2e-test-images/httpd:2.4.39-4", config: web},
		{path: staging + "test-image-latest:latest"},
		{path: staging + "test-image-tag:test"},
		{path: staging + "test-image-tag:all"},
		{path: staging + "test-image-user-uid:latest", config: v1.Config{User: "1002"}},
		{path: staging + "test-image-user-username:latest", config: v1.Config{User: "www-data"}},
		{path: staging + "test-image-user-uid-group:latest", config: v1.Config{User: "1003:1003"}},
		{path: staging + "test-image-user-username-group:latest", config: v1.Config{User: "www-data:www-data"}},
		{path: staging + "test-image-predefined-group:latest", config: v1.Config{User: "1000"}},
	}
	for i := 1; i <= 3; i++ {
		images = append(images,
			suiteImage{path: fmt.Sprintf("%stest-image-%d:latest", staging, i)},
			suiteImage{path: fmt.Sprintf("%stest-image-tags:%d", staging, i)})
	}
	return images
}

// pushImages writes every suite image to the registry at host. Each
// differs in its config (and so in its ID), as the suite's image specs
// expect of images with different names.
func pushImages(host string) error {
	layer, err := busyboxRoot()
	if err != nil {
		return err
	}
	for i, si := range suiteImages() {
		cfg := si.config
		cfg.Env = []string{"PATH=/bin"}
		cfg.Labels = map[string]string{"smol.critest.image": fmt.Sprint(i)}
		img, err := imagetest.Image("amd64", cfg, layer)
		if err != nil {
			return err
		}
		ref, err := name.ParseReference(host + "/" + si.path)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		// With -registry-prefix the suite pulls its container and web
		// server images by path only, so as :latest (cri-tools'
		// PullPublicImage re-parses prefix/path and the tag is lost).
		if strings.HasPrefix(si.path, "e2e-test-images/") {
			latest := ref.Context().Tag("latest")
			if err := remote.Write(latest, img); err != nil {
				return fmt.Errorf("push %s: %w", latest, err)
			}
		}
	}
	return nil
}

// pauseImage writes the sandbox image containerd is given, as a
// docker-save tarball for ctr import: busybox holds a pod's place, as
// `tail -f /dev/null` rather than `sleep`, since specs that share the
// pod's PID namespace look for their own sleep with pgrep (the real
// pause is a process named pause).
func pauseImage(dir string) (string, error) {
	layer, err := busyboxRoot()
	if err != nil {
		return "", err
	}
	img, err := imagetest.Image("amd64", v1.Config{Env: []string{"PATH=/bin"}, Entrypoint: []string{"/bin/tail", "-f", "/dev/null"}}, layer)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(containerdtest.PauseImage)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pause.tar")
	return out, tarball.WriteToFile(out, tag, img)
}

// nginxRef is the image the namespace specs create containers from by its
// full name, without pulling it (cri-tools' nginxContainerImage).
const nginxRef = "registry.k8s.io/e2e-test-images/nginx:1.14-2"

// nginxImage writes, as a docker-save tarball for ctr import, a stand-in
// for nginxRef with what those specs look at: its first process is named
// nginx (a script's process takes the script's name, which pidof finds),
// has "master process" in its command line, writes its pid to
// /var/run/nginx.pid, and serves the web page.
func nginxImage(dir string) (string, error) {
	root, err := busyboxRoot()
	if err != nil {
		return "", err
	}
	script := imagetest.File("usr/sbin/nginx", "#!/bin/sh\necho $$ > /var/run/nginx.pid\nhttpd -f -p 80 -h /www\n")
	script.Mode = 0o755
	extra, err := imagetest.Layer(imagetest.Dir("usr/"), imagetest.Dir("usr/sbin/"), script, imagetest.Dir("var/run/"))
	if err != nil {
		return "", err
	}
	img, err := imagetest.Image("amd64", v1.Config{Env: []string{"PATH=/usr/sbin:/bin"},
		Entrypoint: []string{"/usr/sbin/nginx", "-g", "daemon off; master process"}}, root, extra)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(nginxRef)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "nginx.tar")
	return out, tarball.WriteToFile(out, tag, img)
}

// noNewPrivsRef is the image of the suite's NoNewPrivs specs
// (cri-tools' noNewPrivsImage), created by its full name as nginxRef is.
const noNewPrivsRef = "registry.k8s.io/e2e-test-images/nonewprivs:1.3"

// nnpName is the stand-in's program: this harness's own static binary,
// which behaves as the image's nnp when run by that name.
const nnpName = "nnp"

// nnp is the image's program: it prints its effective uid, which its
// setuid-root file makes 0 unless the no_new_privs bit kept it the
// caller's (the suite runs it as uid 1000).
func nnp() { fmt.Printf("Effective uid: %d\n", os.Geteuid()) }

// noNewPrivsImage writes, as a docker-save tarball for ctr import, a
// stand-in for noNewPrivsRef: busybox and /usr/local/bin/nnp, setuid
// root, as its entrypoint.
func noNewPrivsImage(dir string) (string, error) {
	root, err := busyboxRoot()
	if err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	body, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	prog := imagetest.File("usr/local/bin/"+nnpName, string(body))
	prog.Mode = 0o4755 // setuid root
	extra, err := imagetest.Layer(imagetest.Dir("usr/"), imagetest.Dir("usr/local/"), imagetest.Dir("usr/local/bin/"), prog)
	if err != nil {
		return "", err
	}
	img, err := imagetest.Image("amd64", v1.Config{Env: []string{"PATH=/bin"}, Entrypoint: []string{"/usr/local/bin/" + nnpName}}, root, extra)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(noNewPrivsRef)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "nonewprivs.tar")
	return out, tarball.WriteToFile(out, tag, img)
}

// busyboxRoot is a root of the host's static busybox with every applet it
// has linked in /bin, the suite's users and groups, and a web page.
func busyboxRoot() (v1.Layer, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("static busybox: %w", err)
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	bin := imagetest.File("bin/busybox", string(bb))
	bin.Mode = 0o755
	tmp := imagetest.Dir("tmp/")
	tmp.Mode = 0o1777
	entries := []imagetest.Entry{imagetest.Dir("bin/"), bin,
		imagetest.Dir("etc/"), imagetest.File("etc/passwd", passwd), imagetest.File("etc/group", group),
		imagetest.Dir("root/"), tmp, imagetest.Dir("www/"), imagetest.File("www/index.html", webPage),
		imagetest.Dir("home/"), imagetest.Dir("var/"), imagetest.Dir("var/www/")}
	applets := strings.Fields(string(list))
	for _, applet := range applets {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			// Hard links, as docker.io's busybox has them: a mask of
			// one applet (critest's MaskedPaths spec masks /bin/ls)
			// must not reach the busybox binary through a symlink.
			link := imagetest.Hardlink("bin/"+applet, "bin/busybox")
			link.Mode = bin.Mode // a link's header mode is applied to the one file
			entries = append(entries, link)
		}
	}
	if !slices.Contains(applets, "pgrep") { // the suite's images have it; Debian's static busybox lacks it
		pgrep := imagetest.File("bin/pgrep", pgrepScript)
		pgrep.Mode = 0o755
		entries = append(entries, pgrep)
	}
	if !slices.Contains(applets, "ipcs") { // the same for ipcs -m
		ipcs := imagetest.File("bin/ipcs", ipcsScript)
		ipcs.Mode = 0o755
		entries = append(entries, ipcs)
	}
	return imagetest.Layer(entries...)
}

// ipcsScript stands in for ipcs -m as the suite uses it: the shared
// memory segments the container's IPC namespace has, by id.
const ipcsScript = `#!/bin/sh
cat /proc/sysvipc/shm
`

// pgrepScript stands in for pgrep PATTERN as the suite uses it: the pids
// of the processes whose name contains PATTERN, status 1 if none.
const pgrepScript = `#!/bin/sh
found=1
for d in /proc/[0-9]*; do
	read -r name < "$d/comm" 2>/dev/null || continue
	case "$name" in *"$1"*) echo "${d#/proc/}"; found=0 ;; esac
done
exit $found
`

// discardLogger keeps the registry's request log out of the output.
func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

package machine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/smolvm/smol/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// ErrNotFound reports a machine name with no record.
var ErrNotFound = errors.New("no such machine")

// ErrExists reports a create of a name already taken.
var ErrExists = errors.New("a machine of that name exists")

// Store is the machines directory of one SMOL_HOME.
type Store struct {
	root    string // <home>/machines
	sockets string // where the machines' Unix sockets go (see socketRoot)
}

// File names inside a machine's directory (see the package doc).
const (
	configFile  = "config.json"
	stateFile   = "state.json"
	vmmLock     = "vmm.lock"
	startLock   = "start.lock"
	ControlSock = "control.sock"
	VsockSock   = "vsock.sock"
	StorageFile = "storage.ext4"
	// StorageLayer is the writable layer once it is a copy-on-write
	// layer over bases beside it (a fork on a filesystem without
	// FICLONE; package blk's .smolcow files).
	StorageLayer = "storage.smolcow"
	ConsoleLog   = "console.log"
	VMMLog       = "vmm.log"
	EgressLog    = "egress.log"
)

// OpenStore opens (creating) <home>/machines, private to the user.
func OpenStore(home string) (*Store, error) {
	root := filepath.Join(home, "machines")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("machines directory: %w", err)
	}
	os.Chmod(root, 0o700)
	sockets, err := socketRoot(root)
	if err != nil {
		return nil, err
	}
	return &Store{root: root, sockets: sockets}, nil
}

// socketRoot is where a store's sockets live: not under SMOL_HOME, whose
// filesystem may not hold sockets (NFS, 9p) and whose path may be too long
// for one (108 bytes), but in the user's runtime directory
// ($XDG_RUNTIME_DIR, else a 0700 directory of the user's own in /tmp),
// under a name derived from the store's path.
func socketRoot(storeRoot string) (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || unix.Access(base, unix.W_OK) != nil {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("smol-%d", os.Getuid()))
		if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Lstat(base, &st); err != nil {
			return "", err
		}
		if st.Uid != uint32(os.Getuid()) || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o077 != 0 {
			return "", fmt.Errorf("%s is not a private directory of yours; set XDG_RUNTIME_DIR", base)
		}
	}
	sum := sha256.Sum256([]byte(storeRoot))
	dir := filepath.Join(base, "smol", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// SocketPath is where one of machine name's sockets is.
func (s *Store) SocketPath(name, file string) string { return filepath.Join(s.sockets, name, file) }

// SocketDir makes (0700) and returns machine name's socket directory.
func (s *Store) SocketDir(name string) (string, error) {
	d := filepath.Join(s.sockets, name)
	return d, os.MkdirAll(d, 0o700)
}

// Dir is the directory of machine name.
func (s *Store) Dir(name string) string { return filepath.Join(s.root, name) }

// Path is a file of machine name.
func (s *Store) Path(name, file string) string { return filepath.Join(s.root, name, file) }

// Create records a new machine. Two creates of one name race safely: the
// record is built in a temporary directory renamed into place without
// replacing anything, so exactly one wins.
func (s *Store) Create(spec *Spec) error {
	spec.Version = SpecVersion
	if err := spec.check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if _, err := os.Lstat(s.Dir(spec.Name)); err == nil {
		return fmt.Errorf("machine %s: %w", spec.Name, ErrExists)
	}
	tmp := filepath.Join(s.root, ".new-"+spec.Name+"-"+randomHex())
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := atomicfile.Create(filepath.Join(tmp, configFile), b); err != nil {
		return noSpace(err)
	}
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, s.Dir(spec.Name), unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A filesystem without RENAME_NOREPLACE (9p, some NFS): a plain
		// rename still cannot replace a winner's directory, which is
		// never empty.
		err = os.Rename(tmp, s.Dir(spec.Name))
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("machine %s: %w", spec.Name, ErrExists)
		}
		return err
	}
	syncDir(s.root)
	return nil
}

// Load reads a machine's record; a damaged one is reported as such.
func (s *Store) Load(name string) (*Spec, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	f, err := os.Open(s.Path(name, configFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(s.Dir(name)); derr == nil {
			return nil, fmt.Errorf("machine %s: its directory has no config.json (damaged; remove it with smol machine rm -f %s)", name, name)
		}
		return nil, fmt.Errorf("machine %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpec+1))
	if err != nil {
		return nil, err
	}
	spec, err := decodeSpec(b)
	if err != nil {
		return nil, fmt.Errorf("machine %s: damaged record: %w", name, err)
	}
	if spec.Name != name {
		return nil, fmt.Errorf("machine %s: damaged record: it names %q", name, spec.Name)
	}
	return spec, nil
}

// Names lists the machines, sorted.
func (s *Store) Names() ([]string, error) {
	des, err := os.ReadDir(s.root)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		if de.IsDir() && ValidateName(de.Name()) == nil {
			names = append(names, de.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// Remove deletes a machine's directory. The caller holds the machine's
// start lock and has checked that no VMM runs it. The directory is first
// renamed away, so a half-removed machine never looks like a machine.
func (s *Store) Remove(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	trash := filepath.Join(s.root, ".rm-"+name+"-"+randomHex())
	if err := os.Rename(s.Dir(name), trash); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("machine %s: %w", name, ErrNotFound)
		}
		return err
	}
	syncDir(s.root)
	os.RemoveAll(filepath.Join(s.sockets, name))
	return os.RemoveAll(trash)
}

// Sweep removes what interrupted creates and removes left behind.
func (s *Store) Sweep() {
	des, _ := os.ReadDir(s.root)
	for _, de := range des {
		if n := de.Name(); strings.HasPrefix(n, ".new-") || strings.HasPrefix(n, ".rm-") {
			os.RemoveAll(filepath.Join(s.root, n))
		}
	}
}

func writeFileAtomic(path string, data []byte) error { return noSpace(atomicfile.Write(path, data)) }
func syncDir(dir string)                             { atomicfile.SyncDir(dir) }
func randomHex() string                              { return atomicfile.RandomSuffix() }

func noSpace(err error) error {
	if err != nil && errors.Is(err, unix.ENOSPC) {
		return errors.New("no space left on device under SMOL_HOME")
	}
	return err
}

// StoragePath is the machine's writable layer: its copy-on-write layer
// when it has one, else its raw image (which may not exist yet).
func (s *Store) StoragePath(name string) string {
	if p := s.Path(name, StorageLayer); fileExists(p) {
		return p
	}
	return s.Path(name, StorageFile)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

package shim

import (
	"github.com/smolvm/smol"
	"github.com/smolvm/smol/internal/rootlookup"
	"golang.org/x/sys/unix"
)

// lookUp finds on the host what the guest agent would otherwise look up
// in the container's root before starting c: the program its Args[0]
// names (c.Path) and, for an environment without HOME, the user's home
// directory from the root's /etc/passwd (as runc sets it). The root is
// the same files on both sides of the share; on the host they are local,
// in the guest each lookup is 9P round trips at the container's start.
// What the host cannot find is left to the agent, which then searches
// and reports a failure as it always does.
func (r guestRoot) lookUp(c *smol.Command) {
	if r.host == "" || len(c.Args) == 0 {
		return
	}
	rootFD, err := unix.Open(r.host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(rootFD)
	if rootlookup.EnvValue(c.Env, "HOME") == "" {
		if u, err := rootlookup.LookupUser(c.User, c.Groups, rootFD); err == nil {
			c.Env = append(c.Env[:len(c.Env):len(c.Env)], "HOME="+u.Home)
		}
	}
	path := rootlookup.EnvValue(c.Env, "PATH")
	if path == "" {
		path = rootlookup.DefaultPath
	}
	dir := c.Dir
	if dir == "" {
		dir = "/"
	}
	if p, err := rootlookup.LookPath(c.Args[0], path, dir, rootFD); err == nil {
		c.Path = p
	}
}

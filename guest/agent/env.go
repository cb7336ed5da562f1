package main

import "github.com/smolvm/smol/internal/rootlookup"

// defaultEnv completes a command's environment: PATH, HOME and, on a
// terminal, TERM, unless the image or the user set them.
func defaultEnv(env []string, u rootlookup.User, tty bool) []string {
	out := append([]string(nil), env...)
	add := func(k, v string) {
		if rootlookup.EnvValue(out, k) == "" {
			out = append(out, k+"="+v)
		}
	}
	add("PATH", rootlookup.DefaultPath)
	add("HOME", u.Home)
	if tty {
		add("TERM", "xterm")
	}
	return out
}

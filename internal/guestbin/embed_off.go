//go:build !smol_embed

package guestbin

// Built without the smol_embed tag: nothing embedded.
var kernel, agent = asset{name: "vmlinux"}, asset{name: "agent.cpio"}

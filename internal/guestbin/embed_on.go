//go:build smol_embed

package guestbin

import (
	_ "embed"
	"strings"
)

var (
	//go:embed assets/vmlinux.zst
	kernelZst []byte
	//go:embed assets/vmlinux.sha256
	kernelSum string
	//go:embed assets/agent.cpio.zst
	agentZst []byte
	//go:embed assets/agent.cpio.sha256
	agentSum string

	kernel = asset{name: "vmlinux", compressed: kernelZst, sum: strings.TrimSpace(kernelSum)}
	agent  = asset{name: "agent.cpio", compressed: agentZst, sum: strings.TrimSpace(agentSum)}
)

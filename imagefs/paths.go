package imagefs

import (
	"io"
	"path"
	"strings"
)

// cleanName maps a tar member name to a clean path relative to the root:
// "" for the root itself. Leading "/" and any ".." are neutralised by
// cleaning the name as if it were rooted, so nothing can climb out.
func cleanName(n string) string {
	return strings.TrimPrefix(path.Clean("/"+n), "/")
}

// splitParent returns the parent directory ("" = root) and base of a clean
// relative path.
func splitParent(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// writerOnly hides os.File's ReadFrom so io.CopyBuffer uses the caller's
// large buffer instead of falling back to a 32 KiB one.
type writerOnly struct{ io.Writer }

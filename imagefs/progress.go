package imagefs

import (
	"fmt"
	"io"
	"time"
)

// progressReader counts the (compressed) bytes of one layer as they are
// read and, when a writer is set, redraws one status line at most five
// times a second. The caller only passes a terminal, so "\r" and an erase
// to end of line are fine. It also feeds a stall watchdog: every read that
// returns data pushes the deadline back.
type progressReader struct {
	r       io.Reader
	w       io.Writer
	label   string
	total   int64 // 0 when unknown
	n       int64
	start   time.Time
	last    time.Time
	onBytes func() // stall watchdog reset; nil when unused
}

func newProgressReader(r io.Reader, w io.Writer, label string, total int64, onBytes func()) *progressReader {
	now := time.Now()
	return &progressReader{r: r, w: w, label: label, total: total, start: now, last: now, onBytes: onBytes}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.n += int64(n)
		if p.onBytes != nil {
			p.onBytes()
		}
		if p.w != nil && time.Since(p.last) >= 200*time.Millisecond {
			p.last = time.Now()
			p.draw("")
		}
	}
	return n, err
}

// done prints the final line of the layer.
func (p *progressReader) done() {
	if p.w != nil {
		p.draw("\n")
	}
}

func (p *progressReader) draw(end string) {
	el := time.Since(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.n) / el
	}
	of := ""
	if p.total > 0 {
		of = " / " + humanBytes(float64(p.total))
	}
	fmt.Fprintf(p.w, "\r%s  %s%s  %s/s\x1b[K%s", p.label, humanBytes(float64(p.n)), of, humanBytes(rate), end)
}

func humanBytes(b float64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%.0f B", b)
	}
	u := 0
	for b >= unit && u < 4 {
		b /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", b, "KMGT"[u-1])
}

package balloon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/smolvm/smol/virtio"
)

// MaxPFNBytes bounds one inflate or deflate request: 16384 page frame
// numbers (64 MiB of guest memory). Linux sends at most 256 per request;
// the bound keeps a hostile chain from making the device buffer gigabytes.
const MaxPFNBytes = 64 << 10

// pfnBytes is the size of one page frame number in a request.
const pfnBytes = 4

// errMalformedRequest marks a request whose buffers break the balloon's
// protocol; the device returns it unprocessed.
var errMalformedRequest = errors.New("balloon: malformed request")

// readPFNs copies an inflate or deflate request's page frame numbers out of
// guest memory: the chain's device-readable bytes, an array of le32.
func readPFNs(c *virtio.Chain) ([]uint32, error) {
	n := c.ReadableLen()
	if n == 0 || n > MaxPFNBytes {
		return nil, fmt.Errorf("%w: %d bytes of page frame numbers (want 1 to %d)", errMalformedRequest, n, MaxPFNBytes)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c.NewReader(), buf); err != nil {
		return nil, fmt.Errorf("read page frame numbers: %w", err)
	}
	return parsePFNs(buf)
}

// parsePFNs decodes an array of le32 page frame numbers. A length that is
// not a whole number of entries is malformed: the driver's array and the
// device's reading of it disagree, so none of it is trusted.
func parsePFNs(b []byte) ([]uint32, error) {
	if len(b)%pfnBytes != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of page frame numbers", errMalformedRequest, len(b))
	}
	pfns := make([]uint32, len(b)/pfnBytes)
	for i := range pfns {
		pfns[i] = binary.LittleEndian.Uint32(b[pfnBytes*i:])
	}
	return pfns, nil
}

// pageRun is a run of consecutive balloon pages.
type pageRun struct {
	first uint64 // page frame number of the first page
	count uint64
}

func (r pageRun) addr() uint64   { return r.first * PageSize }
func (r pageRun) length() uint64 { return r.count * PageSize }

// pageRuns groups the page frame numbers that inRAM accepts into runs of
// consecutive pages, in request order, so a discard covers a run at once;
// it returns how many it rejected. Linux's balloon pages are often
// neighbours, which turns 256 hole punches into a few.
func pageRuns(pfns []uint32, inRAM func(addr uint64) bool) (runs []pageRun, rejected int) {
	for _, p := range pfns {
		pfn := uint64(p)
		if !inRAM(pfn * PageSize) {
			rejected++
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].first+runs[n-1].count == pfn {
			runs[n-1].count++
			continue
		}
		runs = append(runs, pageRun{first: pfn, count: 1})
	}
	return runs, rejected
}

// pageInRAM reports whether the balloon page at addr lies in guest RAM.
func pageInRAM(mem virtio.Memory, addr uint64) bool {
	_, err := mem.Slice(addr, PageSize)
	return err == nil
}

// checkReportedRange validates one range of a free page report: a device-
// writable buffer (Linux adds its scatterlist as input buffers) of whole,
// aligned pages inside guest RAM. Anything else is not discarded: an
// unaligned range would free part of a page the guest still uses.
func checkReportedRange(mem virtio.Memory, b virtio.Buffer, writable bool) error {
	switch {
	case !writable:
		return fmt.Errorf("%w: reported range [%#x, +%#x) is device-readable", errMalformedRequest, b.Addr, b.Len)
	case b.Len == 0:
		return fmt.Errorf("%w: reported range at %#x is empty", errMalformedRequest, b.Addr)
	case b.Addr%PageSize != 0 || b.Len%PageSize != 0:
		return fmt.Errorf("%w: reported range [%#x, +%#x) is not page-aligned", errMalformedRequest, b.Addr, b.Len)
	}
	if _, err := mem.Slice(b.Addr, uint64(b.Len)); err != nil {
		return fmt.Errorf("%w: reported range: %w", errMalformedRequest, err)
	}
	return nil
}

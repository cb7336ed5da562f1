package machine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/smolvm/smol/devices/gpu"
)

// Display is a machine's screen as the control API serves it; package
// devices/gpu's Device is one.
type Display interface {
	// Screenshot returns what the display shows now.
	Screenshot() (*image.RGBA, error)
	// Frame returns the number of the frame shown now; WaitFrame waits
	// for one numbered above after.
	Frame() uint64
	WaitFrame(ctx context.Context, after uint64) (uint64, error)
	// Size is the display's size; Cursor the pointer as the guest set it.
	Size() (width, height uint32)
	Cursor() gpu.Cursor
	// Input types and points on the display's keyboard and tablet.
	Input(events []InputEvent) error
}

// InputEvent is one thing a user does at the display (POST /v1/input).
type InputEvent struct {
	// Kind is "key" (Code, Down), "button" (Button, Down), "move" (X, Y)
	// or "wheel" (Delta).
	Kind string `json:"kind"`
	// Code names a key as browsers do (KeyboardEvent.code: "KeyA").
	Code string `json:"code,omitempty"`
	// Button is 0 (left), 1 (middle) or 2 (right), as MouseEvent.button.
	Button int  `json:"button,omitempty"`
	Down   bool `json:"down,omitempty"`
	// X and Y are a position in display pixels.
	X int `json:"x,omitempty"`
	Y int `json:"y,omitempty"`
	// Delta is wheel notches, positive away from the user.
	Delta int `json:"delta,omitempty"`
}

// InputRequest is POST /v1/input: events applied in order.
type InputRequest struct {
	Events []InputEvent `json:"events"`
}

// MaxInputEvents bounds one input request.
const MaxInputEvents = 256

func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	d := s.b.Display()
	if d == nil {
		writeError(w, http.StatusNotFound, ErrNoDisplay)
		return
	}
	var req InputRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("input request: %w", err))
		return
	}
	if len(req.Events) > MaxInputEvents {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%d input events: at most %d at once", len(req.Events), MaxInputEvents))
		return
	}
	if err := d.Input(req.Events); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// Input sends keyboard and pointer events to the machine's display.
func (c *Client) Input(ctx context.Context, events []InputEvent) error {
	return c.call(ctx, http.MethodPost, "/v1/input", InputRequest{Events: events}, nil)
}

// DisplayInfo is GET /v1/display: the display's size, the frame it shows
// and the guest's cursor.
type DisplayInfo struct {
	Width  uint32     `json:"width"`
	Height uint32     `json:"height"`
	Frame  uint64     `json:"frame"`
	Cursor gpu.Cursor `json:"cursor"`
}

func (s *Server) display(w http.ResponseWriter, r *http.Request) {
	d := s.b.Display()
	if d == nil {
		writeError(w, http.StatusNotFound, ErrNoDisplay)
		return
	}
	width, height := d.Size()
	writeJSON(w, http.StatusOK, DisplayInfo{Width: width, Height: height, Frame: d.Frame(), Cursor: d.Cursor()})
}

// Display asks the VMM about the machine's display.
func (c *Client) Display(ctx context.Context) (DisplayInfo, error) {
	var info DisplayInfo
	err := c.call(ctx, http.MethodGet, "/v1/display", nil, &info)
	return info, err
}

// ErrNoDisplay says the machine was created without --gpu.
var ErrNoDisplay = errors.New("the machine has no display (create it with --gpu)")

// FrameHeader carries the frame number of a GET /v1/screen answer.
const FrameHeader = "Smol-Frame"

// maxFrameWait bounds a long poll for a new frame (GET /v1/screen?after=N):
// the answer is then the current picture, and the viewer asks again.
const maxFrameWait = 25 * time.Second

// screen is GET /v1/screen: the current picture as PNG. With ?after=N it
// first waits (up to maxFrameWait) for a frame numbered above N, so a
// viewer fetches a picture only when the guest drew a new one.
func (s *Server) screen(w http.ResponseWriter, r *http.Request) {
	d := s.b.Display()
	if d == nil {
		writeError(w, http.StatusNotFound, ErrNoDisplay)
		return
	}
	frame := d.Frame()
	if a := r.URL.Query().Get("after"); a != "" {
		after, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("after=%q is not a frame number", a))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), maxFrameWait)
		frame, _ = d.WaitFrame(ctx, after)
		cancel()
	}
	img, err := d.Screenshot()
	if err != nil {
		writeError(w, http.StatusConflict, err)
		return
	}
	var buf bytes.Buffer
	if err := gpu.EncodePNG(&buf, img); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set(FrameHeader, strconv.FormatUint(frame, 10))
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// Screen fetches the machine's picture as PNG bytes, with its frame
// number; after > 0 waits for a frame numbered above it first (a bounded
// wait: the answer may be the same frame).
func (c *Client) Screen(ctx context.Context, after uint64) ([]byte, uint64, error) {
	path := "/v1/screen"
	if after > 0 {
		path += "?after=" + strconv.FormatUint(after, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://machine"+path, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, decodeResponse(resp, nil)
	}
	// The largest display is 3840x2400: its PNG stays far below 64 MiB.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, 0, err
	}
	frame, _ := strconv.ParseUint(resp.Header.Get(FrameHeader), 10, 64)
	return b, frame, nil
}

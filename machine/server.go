package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"
)

// Backend is the VMM behind a control socket.
type Backend interface {
	// Info describes the machine now.
	Info() Info
	// DialAgent opens a new stream to the guest agent's exec port.
	DialAgent(ctx context.Context) (net.Conn, error)
	// Shutdown asks the guest to power off, stops the VM hard after
	// timeout, and returns once the VM has ended.
	Shutdown(timeout time.Duration) error
	// Pause parks the vCPUs; Resume lets them run. Each does nothing in
	// the state it leads to.
	Pause() error
	Resume() error
	// Snapshot writes the machine's state to a new file (SnapshotRequest).
	Snapshot(req SnapshotRequest) error
	// Fork starts the children of a fork (ForkRequest).
	Fork(req ForkRequest) error
	// Display is the machine's screen, nil without one.
	Display() Display
}

// Server serves the control API of one machine.
type Server struct {
	b    Backend
	http *http.Server
	wg   sync.WaitGroup // exec relays in flight
}

// NewServer makes the API over b.
func NewServer(b Backend) *Server {
	s := &Server{b: b}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("POST /v1/exec", s.exec)
	mux.HandleFunc("POST /v1/stop", s.stop)
	mux.HandleFunc("POST /v1/pause", s.lifecycle(Backend.Pause))
	mux.HandleFunc("POST /v1/resume", s.lifecycle(Backend.Resume))
	mux.HandleFunc("POST /v1/snapshot", s.snapshot)
	mux.HandleFunc("POST /v1/fork", s.fork)
	mux.HandleFunc("GET /v1/screen", s.screen)
	mux.HandleFunc("GET /v1/display", s.display)
	mux.HandleFunc("POST /v1/input", s.input)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return s
}

// Serve answers on l until Close.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops listening and cuts open exec relays.
func (s *Server) Close() error {
	return s.http.Close()
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.b.Info())
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var req StopRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil && err != io.EOF {
		writeError(w, http.StatusBadRequest, fmt.Errorf("stop request: %w", err))
		return
	}
	timeout := time.Duration(req.Timeout)
	if timeout < 0 {
		writeError(w, http.StatusBadRequest, errors.New("negative timeout"))
		return
	}
	if timeout == 0 {
		timeout = DefaultStopTimeout
	}
	if err := s.b.Shutdown(timeout); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	var req SnapshotRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("snapshot request: %w", err))
		return
	}
	if !filepath.IsAbs(req.Path) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("snapshot path %q is not absolute", req.Path))
		return
	}
	if err := s.b.Snapshot(req); err != nil {
		writeError(w, http.StatusConflict, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req ForkRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("fork request: %w", err))
		return
	}
	if err := req.check(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if err := s.b.Fork(req); err != nil {
		writeError(w, http.StatusConflict, err)
		return
	}
	writeJSON(w, http.StatusOK, ForkResponse{Children: req.Names})
}

// lifecycle answers pause and resume.
func (s *Server) lifecycle(do func(Backend) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := do(s.b); err != nil {
			writeError(w, http.StatusConflict, err)
			return
		}
		writeJSON(w, http.StatusOK, s.b.Info())
	}
}

// exec upgrades the request's connection and relays it to a fresh agent
// stream: the client then speaks the agent protocol to the guest.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != execUpgrade {
		writeError(w, http.StatusBadRequest, fmt.Errorf("exec needs Upgrade: %s", execUpgrade))
		return
	}
	if st := s.b.Info().State; st != Running {
		hint := ""
		if st == Paused {
			hint = "; resume it first"
		}
		writeError(w, http.StatusConflict, fmt.Errorf("the machine is %s%s", st, hint))
		return
	}
	agent, err := s.b.DialAgent(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("reaching the guest agent: %w", err))
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		agent.Close()
		writeError(w, http.StatusInternalServerError, errors.New("connection cannot be upgraded"))
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		agent.Close()
		return
	}
	fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", execUpgrade)
	if err := buf.Flush(); err != nil {
		client.Close()
		agent.Close()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		relay(client, buf.Reader, agent)
	}()
}

// relay copies both ways until either side ends, then closes both. Bytes
// the HTTP server had already buffered from the client go first.
func relay(client net.Conn, buffered io.Reader, agent net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(agent, io.MultiReader(buffered, client))
		closeWrite(agent)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, agent)
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
	client.Close()
	agent.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, APIError{Error: err.Error()})
}

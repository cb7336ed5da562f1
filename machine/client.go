package machine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Client talks to one machine's control socket.
type Client struct {
	sock string
	http *http.Client
}

// NewClient returns a client of the control socket at sock.
func NewClient(sock string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	return &Client{sock: sock, http: &http.Client{Transport: &http.Transport{DialContext: dial}}}
}

// ErrNoVMM says nothing answers on the control socket.
var ErrNoVMM = errors.New("the machine's VMM does not answer")

// Status asks the VMM for the machine's state.
func (c *Client) Status(ctx context.Context) (Info, error) {
	var info Info
	err := c.call(ctx, http.MethodGet, "/v1/status", nil, &info)
	return info, err
}

// Stop shuts the machine down (see StopRequest) and returns once its VMM
// process has exited. The VMM lets go of the machine's lock before its
// process is gone (the kernel tears down its VM and memory after that),
// so a caller that must know the process ended, as `rm -f` promises,
// cannot learn it from the lock: Stop holds a pidfd of the process that
// serves the control socket and waits on it.
func (c *Client) Stop(ctx context.Context, timeout time.Duration) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.sock)
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	defer conn.Close()
	vmm, err := openPeerProcess(conn.(*net.UnixConn))
	if err != nil {
		return err
	}
	if vmm != nil {
		defer vmm.Close()
	}
	// The answer comes over the connection the pidfd was opened for: the
	// process that answers was alive when it was opened, so the pidfd is
	// the VMM's and not a later process's that took its pid.
	if err := c.roundTrip(ctx, conn, http.MethodPost, "/v1/stop", StopRequest{Timeout: Duration(timeout)}, nil); err != nil {
		return err
	}
	if vmm == nil {
		return nil
	}
	return vmm.waitExit(ctx, vmmExitWait)
}

// vmmExitWait bounds how long Stop waits for the VMM process to exit
// once its VM has ended.
const vmmExitWait = 10 * time.Second

// Pause parks the machine's vCPUs.
func (c *Client) Pause(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/pause", nil, nil)
}

// Resume lets a paused machine run again.
func (c *Client) Resume(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/resume", nil, nil)
}

// Snapshot has the VMM write the machine's snapshot to req.Path
// (absolute).
func (c *Client) Snapshot(ctx context.Context, req SnapshotRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/snapshot", req, nil)
}

// Fork has the VMM start the children req names; it returns once they
// all run.
func (c *Client) Fork(ctx context.Context, req ForkRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/fork", req, nil)
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	req, err := newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	defer resp.Body.Close()
	return decodeResponse(resp, out)
}

// roundTrip is call over a connection the caller dialled and closes.
func (c *Client) roundTrip(ctx context.Context, conn net.Conn, method, path string, body, out any) error {
	req, err := newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := req.Write(conn); err != nil {
		return fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	defer resp.Body.Close()
	return decodeResponse(resp, out)
}

func newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	return http.NewRequestWithContext(ctx, method, "http://machine"+path, rd)
}

func decodeResponse(resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e APIError
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("control API: %s", resp.Status)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Exec opens a stream to the guest agent through the VMM: the caller
// speaks the agent protocol on it (agent.Run) and closes it.
func (c *Client) Exec(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.sock)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	fmt.Fprintf(conn, "POST /v1/exec HTTP/1.1\r\nHost: machine\r\nUpgrade: %s\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n", execUpgrade)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w (%v)", ErrNoVMM, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		if err := decodeResponse(resp, nil); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("control API: exec answered %s", resp.Status)
	}
	if ctx.Err() != nil {
		conn.Close()
		return nil, ctx.Err()
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn reads first what the response parser buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite ends the client's side of the stream.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

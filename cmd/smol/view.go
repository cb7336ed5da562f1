package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/machine"
)

//go:embed view.html
var viewPage string

var viewTemplate = template.Must(template.New("view").Parse(viewPage))

// machineView is `smol machine view NAME [--listen ADDR]`: a web page
// showing the machine's screen live, whose keyboard and mouse reach the
// guest. It listens on the loopback interface only, on a random port
// unless told, and every request must carry the random token printed in
// the URL: anyone else on the host who can reach the port still cannot
// see or type.
func machineView(args []string) error {
	fs := newFlags("view", "NAME [--listen 127.0.0.1:PORT]")
	listen := fs.String("listen", "127.0.0.1:0", "the address to serve the page on")
	names, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	m, err := smol.OpenMachine(names[0])
	if err != nil {
		return err
	}
	if _, err := m.Display(context.Background()); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var t [16]byte
	rand.Read(t[:])
	token := hex.EncodeToString(t[:])
	srv := &http.Server{Handler: viewHandler(m, token), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		srv.Close()
	}()
	fmt.Printf("http://%s/?token=%s\n", l.Addr(), token)
	if isTerminal(int(os.Stderr.Fd())) {
		fmt.Fprintf(os.Stderr, "smol: showing machine %s; open the address above (Ctrl-C to stop)\n", m.Name())
	}
	if err := srv.Serve(l); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// viewHandler serves the page, the screen and the input of m.
func viewHandler(m *smol.NamedMachine, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob:; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		viewTemplate.Execute(w, struct{ Name string }{m.Name()})
	})
	mux.HandleFunc("GET /screen", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		png, frame, err := m.Screen(r.Context(), after)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set(machine.FrameHeader, strconv.FormatUint(frame, 10))
		w.Write(png)
	})
	mux.HandleFunc("POST /input", func(w http.ResponseWriter, r *http.Request) {
		var req machine.InputRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := m.Input(r.Context(), req.Events); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("token")), []byte(token)) != 1 {
			http.Error(w, "a token is needed: use the address smol machine view printed", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

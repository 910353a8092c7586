package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snowflake-proxy/snowflake-proxy/compat"
	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// Config configures Serve. Every function must be safe to call from any
// goroutine at any time.
type Config struct {
	// Stats returns the wire server's counters.
	Stats func() wire.Stats
	// Claims returns the node claim per database (compat.Service.Claims).
	Claims func() map[string]compat.ClaimState
	// Leases returns the generator's lease counters
	// (compat.Service.LeaseStats); nil: not shown.
	Leases func() generator.LeaseStats
	// CatalogWatches returns whether each database's catalog watch is
	// armed (compat.Service.CatalogWatches); nil: not shown.
	CatalogWatches func() map[string]bool
	// Dials is the upstream dial histogram the wire server observes into;
	// nil: not shown.
	Dials *Dials
	// Serving returns nil while the proxy accepts clients, else why not.
	Serving func() error
	// PingUpstream checks that the upstream answers, within ctx.
	PingUpstream func(ctx context.Context) error
	// Node is the proxy's node; 0 makes /readyz fail.
	Node int
	// NodeSource says where Node came from: node (--node), hostname or
	// auto; shown as the label of snowflake_proxy_node.
	NodeSource string
	// NodeCheck, when set, reports whether the claim of --node auto is
	// current; an error makes /readyz fail.
	NodeCheck func() error
	// Logger: nil means slog.Default().
	Logger *slog.Logger
}

// Timeouts of the HTTP server: admin clients are scrapers and probes, so
// anything slower is stuck.
const (
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
)

// Server is a running admin listener.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen binds addr, so that a bad or taken address fails before anything
// else starts; Serve then serves it.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on admin address %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves the admin routes on ln until Close.
func Serve(ln net.Listener, cfg Config) *Server {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "admin")
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(cfg),
	)
	if cfg.Dials != nil {
		reg.MustRegister(cfg.Dials.h)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{log}}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.Handle("GET /readyz", newReadiness(cfg))
	s := &Server{
		ln: ln,
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, WriteTimeout: writeTimeout,
			IdleTimeout: idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin listening", "addr", ln.Addr().String())
	return s
}

// Addr is the address the admin listener is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the listener and the requests in progress, and waits for
// the server's goroutine.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, body)
}

// slogErrorLog gives promhttp's errors to the logger.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) { l.log.Warn("metrics", "err", fmt.Sprint(v...)) }

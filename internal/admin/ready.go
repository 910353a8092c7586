package admin

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Bounds of the upstream check behind /readyz: probes arriving closer
// together than readyCacheFor share one check, so that no probe rate can
// load the upstream.
const (
	readyCacheFor    = time.Second
	upstreamCheckFor = 2 * time.Second
)

// readiness answers /readyz: 200 "ok" when the proxy accepts clients, has
// a node, knows of no other proxy with it and reaches the upstream; else
// 503 and the first reason, on one line.
type readiness struct {
	cfg Config

	mu      sync.Mutex // held during a check: concurrent probes wait for it
	checked time.Time
	lastErr error
}

func newReadiness(cfg Config) *readiness { return &readiness{cfg: cfg} }

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if reason := r.reason(); reason != "" {
		writeText(w, http.StatusServiceUnavailable, reason)
		return
	}
	writeText(w, http.StatusOK, "ok")
}

// reason is why the proxy is not ready, or "".
func (r *readiness) reason() string {
	if r.cfg.Serving != nil {
		if err := r.cfg.Serving(); err != nil {
			return "not accepting clients: " + oneLine(err)
		}
	}
	if r.cfg.Node == 0 {
		return "no node set (--node)"
	}
	if r.cfg.NodeCheck != nil {
		if err := r.cfg.NodeCheck(); err != nil {
			return "node claim: " + oneLine(err)
		}
	}
	if r.cfg.Claims != nil {
		claims := r.cfg.Claims()
		dbs := make([]string, 0, len(claims))
		for db, st := range claims {
			if st.Conflict {
				dbs = append(dbs, db)
			}
		}
		if len(dbs) > 0 {
			sort.Strings(dbs)
			return fmt.Sprintf("node %d is held by another proxy on database %q", r.cfg.Node, dbs[0])
		}
	}
	if err := r.upstream(); err != nil {
		return "upstream unreachable: " + oneLine(err)
	}
	return ""
}

// upstream returns the result of the last upstream check, made again when
// older than readyCacheFor.
func (r *readiness) upstream() error {
	if r.cfg.PingUpstream == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.checked.IsZero() && time.Since(r.checked) < readyCacheFor {
		return r.lastErr
	}
	// Not the probe's context: a probe that gives up must not leave a
	// cancellation cached as the upstream's state.
	ctx, cancel := context.WithTimeout(context.Background(), upstreamCheckFor)
	defer cancel()
	r.lastErr = r.cfg.PingUpstream(ctx)
	r.checked = time.Now()
	return r.lastErr
}

// oneLine keeps a reason on one line: driver errors may span several.
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// setProcs applies --procs and --event-loops and returns the GOMAXPROCS
// and the number of event loops in effect.
//
// procs > 0, or the GOMAXPROCS environment variable, is used as is; loops
// 0 is then one loop per two Ps (wire.DefaultEventLoops). Otherwise the loops
// get Ps of their own on top of the runtime's choice (the CPUs the process
// may use). A loop thread spends most of its time waiting in the kernel
// (io_uring_enter, epoll_wait), and the
// runtime counts a thread in a system call as holding its P: with no P
// idle, its monitor thread (sysmon) takes the loop's P back 20 µs into
// every wait and keeps waking every 20 µs to do so, and the loop's return
// from the kernel takes the slow path to get a P again. With Ps of their
// own the monitor wakes a few times less often and costs a few times less
// CPU per transaction (bench/README.md, "Figures behind design choices").
func setProcs(procs, loops int) (gomaxprocs, eventLoops int) {
	explicit := procs > 0 || os.Getenv("GOMAXPROCS") != ""
	switch {
	case procs > 0:
		runtime.GOMAXPROCS(procs)
	case !explicit:
		// Start from the runtime's own choice, not from what an earlier
		// call set: a second run in one process (the tests run Main many
		// times) doubled GOMAXPROCS, and with it the event loops, each
		// time.
		runtime.SetDefaultGOMAXPROCS()
	}
	n := runtime.GOMAXPROCS(0)
	if loops == 0 {
		loops = wire.DefaultEventLoops(n)
	}
	if !explicit && loops > 0 && wire.EventLoopsAvailable {
		runtime.GOMAXPROCS(n + loops)
	}
	return runtime.GOMAXPROCS(0), loops
}

// servePprof serves the net/http/pprof handlers on addr (never on the
// proxy's own listener) until stop is called.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	log.Info("pprof listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

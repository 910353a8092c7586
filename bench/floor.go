package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
)

// The floor columns: bench/floor/relay.c, a relay that does nothing but the
// system calls every epoll relay must make (one thread, level-triggered
// epoll, one recv and one send per readiness event), and
// bench/floor/relay_uring.c, the same on io_uring. Their figures show how
// fast a relay can be on this machine at all, which tells the proxy's own
// overhead apart from the cost of relaying, and PgBouncer's advantage apart
// from what is out of reach for any relay in user space.

// floorRelay is one build of the floor: bench/floor/relay.c on epoll, and
// bench/floor/relay_uring.c, the same instrument on io_uring, which makes
// fewer system calls than any epoll relay can (see its header).
type floorRelay struct {
	source string // relative to the module root
	bin    string // file name of the build
	about  string // for the report's header
}

var (
	floorEpoll = floorRelay{"bench/floor/relay.c", "floor-relay",
		"one thread, level-triggered epoll, one recv and one send per event"}
	floorUring = floorRelay{"bench/floor/relay_uring.c", "floor-relay-uring",
		"one thread, io_uring: per received chunk a send linked to the next receive, one io_uring_enter per batch"}
)

// build compiles the relay into dir with cc (the compiler cgo needs
// anyway, so a machine that builds the proxy has it).
func (f floorRelay) build(ctx context.Context, root, dir string) (string, error) {
	compiler, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler (cc) to build %s: %w", f.source, err)
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, f.bin)
	cmd := exec.CommandContext(ctx, compiler, "-O2", "-Wall", "-o", bin, filepath.Join(root, f.source))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc %s: %v: %s", f.source, err, oneLine(lastN(string(out), 300)))
	}
	return bin, nil
}

// start runs the relay built as bin on a free port in front of the
// server's Unix socket (sockDir, pgPort), as the proxy and PgBouncer are.
func (f floorRelay) start(ctx context.Context, bin, dir, sockDir string, pgPort int) (*proc, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	sock := filepath.Join(sockDir, fmt.Sprintf(".s.PGSQL.%d", pgPort))
	p, err := startAccepting(ctx, f.bin, filepath.Join(dir, f.bin+".log"), nil, port, bin, strconv.Itoa(port), sock)
	if err != nil {
		return nil, 0, err
	}
	return p, port, nil
}

// startFloorRelays builds and starts both floor relays, or records why a
// column is left out (the io_uring one where the kernel refuses io_uring:
// an old kernel, io_uring_disabled, a seccomp profile).
func (h *harness) startFloorRelays(ctx context.Context) {
	h.floor.name, h.uring.name = "floor relay", "io_uring floor relay"
	for _, r := range []struct {
		side  *sideRelay
		floor floorRelay
	}{{&h.floor, floorEpoll}, {&h.uring, floorUring}} {
		skip := ""
		switch {
		case h.cfg.skipFloor:
			skip = r.side.name + " skipped (-skip-floor)"
		case h.cfg.upstream != upSocket:
			skip = r.side.name + " not run (" + h.cfg.upstream.flag() + "): it relays to the server's Unix socket only, in plaintext, so it is no floor for relays on TCP"
			fmt.Println("bench: " + skip)
		case h.cfg.clientTLS:
			skip = r.side.name + " not run (-client-tls): it does not terminate TLS, so it is no floor for relays that do"
			fmt.Println("bench: " + skip)
		}
		f := r.floor
		started := r.side.start(skip, func() (*proc, int, error) {
			bin, err := f.build(ctx, h.root, h.dir)
			if err != nil {
				return nil, 0, err
			}
			return f.start(ctx, bin, h.dir, h.srv.SocketDir(), h.srv.Port())
		})
		if started {
			if h.mach.Floor != "" {
				h.mach.Floor += "; "
			}
			h.mach.Floor += f.source + " (cc -O2): " + f.about + ", upstream Unix socket"
		}
	}
}

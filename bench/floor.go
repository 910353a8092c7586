package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
)

// The floor column: bench/floor/relay.c, a relay that does nothing but the
// system calls every user-space relay must make (one thread, level-triggered
// epoll, one recv and one send per readiness event). Its figures show how
// fast a relay can be on this machine at all, which tells the proxy's own
// overhead apart from the cost of relaying, and PgBouncer's advantage apart
// from what is out of reach for any relay in user space.

// floorSource is the relay's source, relative to the module root.
const floorSource = "bench/floor/relay.c"

// buildFloor compiles the floor relay into dir with cc (the compiler cgo
// needs anyway, so a machine that builds the proxy has it).
func buildFloor(ctx context.Context, root, dir string) (string, error) {
	compiler, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler (cc) to build %s: %w", floorSource, err)
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, "floor-relay")
	cmd := exec.CommandContext(ctx, compiler, "-O2", "-Wall", "-o", bin, filepath.Join(root, floorSource))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc %s: %v: %s", floorSource, err, oneLine(lastN(string(out), 300)))
	}
	return bin, nil
}

// startFloor runs the floor relay on a free port in front of the server's
// Unix socket (sockDir, pgPort), as the proxy and PgBouncer are.
func startFloor(ctx context.Context, bin, dir, sockDir string, pgPort int) (*proc, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	sock := filepath.Join(sockDir, fmt.Sprintf(".s.PGSQL.%d", pgPort))
	p, err := startAccepting(ctx, "floor relay", filepath.Join(dir, "floor-relay.log"), nil, port, bin, strconv.Itoa(port), sock)
	if err != nil {
		return nil, 0, err
	}
	return p, port, nil
}

// startFloorRelay builds and starts the floor relay, or records why its
// column is left out.
func (h *harness) startFloorRelay(ctx context.Context) {
	h.floor.name = "floor relay"
	skip := ""
	switch {
	case h.cfg.skipFloor:
		skip = "floor relay skipped (-skip-floor)"
	case h.cfg.upstream != upSocket:
		skip = "floor relay not run (" + h.cfg.upstream.flag() + "): it relays to the server's Unix socket only, in plaintext, so it is no floor for relays on TCP"
		fmt.Println("bench: " + skip)
	}
	started := h.floor.start(skip, func() (*proc, int, error) {
		bin, err := buildFloor(ctx, h.root, h.dir)
		if err != nil {
			return nil, 0, err
		}
		return startFloor(ctx, bin, h.dir, h.srv.SocketDir(), h.srv.Port())
	})
	if started {
		h.mach.Floor = floorSource + " (cc -O2): one thread, level-triggered epoll, one recv and one send per event, upstream Unix socket"
	}
}

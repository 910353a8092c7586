package main

import (
	"runtime"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

func TestSetProcsGivesEventLoopsTheirOwnPs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		name         string
		env          string // $GOMAXPROCS
		procs, loops int    // --procs, --event-loops
		wantProcs    int    // before the loops' own Ps; 0: the runtime's default
		loopPs       int    // Ps added for the loops (where there are loops)
		wantLoops    int
	}{
		{"defaults", "", 0, 0, 0, -1, 0},
		{"one loop", "", 0, 1, 0, 1, 1},
		{"no loops", "", 0, -1, 0, 0, -1},
		{"--procs is used as is", "", 3, 0, 3, 0, 1},
		{"--procs with one loop", "", 3, 1, 3, 0, 1},
		{"$GOMAXPROCS is used as is", "2", 0, 0, 2, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.SetDefaultGOMAXPROCS()
			def := runtime.GOMAXPROCS(0)
			runtime.GOMAXPROCS(2) // an earlier run's setting, or $GOMAXPROCS=2's
			t.Setenv("GOMAXPROCS", c.env)
			want, wantLoops, loopPs := c.wantProcs, c.wantLoops, c.loopPs
			if want == 0 {
				want = def
			}
			if wantLoops == 0 {
				wantLoops = wire.DefaultEventLoops(def)
			}
			if loopPs < 0 {
				loopPs = wantLoops
			}
			if wire.EventLoopsAvailable {
				want += loopPs
			}
			for run := 1; run <= 3; run++ {
				// Regression: each run in one process doubled GOMAXPROCS
				// (and the event loops): after a dozen runs of Main the
				// tests died of thread exhaustion.
				procs, loops := setProcs(c.procs, c.loops)
				if procs != want || loops != wantLoops || runtime.GOMAXPROCS(0) != procs {
					t.Fatalf("run %d: setProcs(%d, %d) = %d, %d (GOMAXPROCS %d), want %d, %d",
						run, c.procs, c.loops, procs, loops, runtime.GOMAXPROCS(0), want, wantLoops)
				}
			}
		})
	}
}

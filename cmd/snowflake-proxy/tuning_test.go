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
		wantProcs    int    // before the loops' own Ps
		loopPs       int    // Ps added for the loops (where there are loops)
		wantLoops    int
	}{
		{"defaults", "", 0, 0, 2, 2, 2},
		{"one loop", "", 0, 1, 2, 1, 1},
		{"no loops", "", 0, -1, 2, 0, -1},
		{"--procs is used as is", "", 3, 0, 3, 0, 3},
		{"--procs with one loop", "", 3, 1, 3, 0, 1},
		{"$GOMAXPROCS is used as is", "2", 0, 0, 2, 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GOMAXPROCS(2) // the runtime's choice on a 2-CPU machine
			t.Setenv("GOMAXPROCS", c.env)
			want := c.wantProcs
			if wire.EventLoopsAvailable {
				want += c.loopPs
			}
			procs, loops := setProcs(c.procs, c.loops)
			if procs != want || loops != c.wantLoops || runtime.GOMAXPROCS(0) != procs {
				t.Fatalf("setProcs(%d, %d) = %d, %d (GOMAXPROCS %d), want %d, %d",
					c.procs, c.loops, procs, loops, runtime.GOMAXPROCS(0), want, c.wantLoops)
			}
		})
	}
}

package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// runDecode prints ms, timestamp (UTC), node and count of each ID.
func (m *Main) runDecode(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(m.Stderr, "usage: snowflake-proxy decode ID...")
		return 2
	}
	code := 0
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 0 {
			fmt.Fprintf(m.Stderr, "snowflake-proxy: %q is not a snowflake (want a non-negative int8)\n", a)
			code = 1
			continue
		}
		ms, node, count := generator.Decompose(id)
		ts := time.UnixMilli(ms + generator.EpochUnixMs).UTC()
		fmt.Fprintf(m.Stdout, "%d\tms=%d\ttime=%s\tnode=%d\tcount=%d\n", id, ms, ts.Format("2006-01-02 15:04:05.000Z07:00"), node, count)
	}
	return code
}

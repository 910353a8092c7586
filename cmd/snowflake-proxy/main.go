// Command snowflake-proxy is a PostgreSQL wire-protocol proxy that makes the
// pgEdge snowflake extension's SQL API work on a stock PostgreSQL.
//
//	snowflake-proxy [flags]          run the proxy
//	snowflake-proxy decode ID...     print the fields of snowflake IDs
//	snowflake-proxy version          print the version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Signals: make(chan os.Signal, 2), Reload: make(chan os.Signal, 1)}
	signal.Notify(m.Signals, syscall.SIGINT, syscall.SIGTERM)
	signal.Notify(m.Reload, syscall.SIGHUP)
	os.Exit(m.Run(ctx, os.Args[1:]))
}

// Main is the program, with its environment as fields so tests can run it.
type Main struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Signals delivers SIGINT/SIGTERM: the first drains sessions for the
	// grace period, a second one aborts.
	Signals chan os.Signal
	// Reload delivers SIGHUP: what can change live is read again; it
	// never stops the proxy (a closed terminal sends it too). nil: none.
	Reload chan os.Signal
	// Hostname gives --node-from-hostname its name. nil: os.Hostname.
	Hostname func() (string, error)
}

// Run executes the command line and returns the exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "decode":
			return m.runDecode(args[1:])
		case "version":
			fmt.Fprintln(m.Stdout, versionLine(debug.ReadBuildInfo()))
			return 0
		}
	}
	return m.runProxy(ctx, args)
}

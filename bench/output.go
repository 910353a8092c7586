package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// mdBuffer accumulates the Markdown report.
type mdBuffer struct{ strings.Builder }

func (b *mdBuffer) printf(format string, args ...any) { fmt.Fprintf(b, format, args...) }

// writeFileWith creates path and fills it with write.
func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// argsString is the command line the run was started with.
func (c *config) argsString() string { return strings.Join(c.args, " ") }

//go:build !unix

package wire

import (
	"bufio"
	"net"
)

// Without Unix system calls the pumps read and write through net.Conn
// only: poll is never entered (frameReader.src stays nil).

type sockReader struct{}

func (f *frameReader) usePoll(net.Conn) {}

func (f *frameReader) poll(func(typ byte) error) error { return nil }

func useSockWriter(*bufio.Writer, net.Conn) {}

//go:build !unix

package netloop

import (
	"bufio"
	"net"
)

// Without Unix system calls the pumps read and write through net.Conn
// only: Poll is never entered (CanPoll is false).

type sockReader struct {
	err error
	pre []byte
}

// UsePoll does nothing here: the input keeps reading the connection.
func (in *Input) UsePoll(net.Conn) {}

// Poll is never called here (CanPoll is false).
func (in *Input) Poll(Stepper, Side) error { return nil }

// UseSockWriter does nothing here: bw keeps writing the connection.
func UseSockWriter(*bufio.Writer, net.Conn) {}

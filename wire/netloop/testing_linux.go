//go:build linux

package netloop

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"
)

// CallOnLoopThread runs call inside a step on a loop thread of a new
// Loop, as a session relayed there would, and returns what call panicked
// with (nil: nothing). For tests of the loop-thread rule; it panics
// outside test binaries.
func CallOnLoopThread(call func()) (panicked any, err error) {
	mustTest("CallOnLoopThread")
	lp, err := NewLoop(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer lp.Stop()
	client, cin, err := loopbackPair()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	sout, server, err := loopbackPair()
	if err != nil {
		_ = cin.Close()
		return nil, err
	}
	defer server.Close()
	cIn, sIn := NewInput(cin, 1<<20), NewInput(sout, 1<<20)
	steps := &callSteps{call: call, got: make(chan any, 1)}
	r := NewRelay(steps, noParking{}, [2]*Input{&cIn, &sIn}, [2]*bufio.Writer{bufio.NewWriter(cin), bufio.NewWriter(sout)})
	taken, err := r.Enter(lp, [2]net.Conn{cin, sout}, func() bool { return false })
	if !taken {
		_, _ = cin.Close(), sout.Close()
		return nil, errors.New("netloop: the loop did not take the session")
	}
	if err != nil {
		conns, lerr := r.Leave()
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
		return nil, errors.Join(err, lerr)
	}
	_, err = client.Write([]byte{'S', 0, 0, 0, 4}) // one message: one step
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	if err == nil {
		select {
		case panicked = <-steps.got:
		case <-t.C:
			err = errors.New("netloop: the loop ran no step in 10 s")
			_ = client.Close() // end of input: the loop hands the session over
		}
	}
	r.Wait()
	conns, lerr := r.Leave()
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
	return panicked, errors.Join(err, lerr)
}

// callSteps calls call in every step, passes on what it panicked with,
// and hands the session over.
type callSteps struct {
	call func()
	got  chan any
}

func (s *callSteps) Step(Side, byte) error {
	func() {
		defer func() {
			select {
			case s.got <- recover():
			default:
			}
		}()
		s.call()
	}()
	return ErrHandover
}

func (s *callSteps) EndTurn(Side) error { return nil }

type noParking struct{}

func (noParking) MayReenter() bool { return false }
func (noParking) Wake(Side)        {}

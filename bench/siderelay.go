package main

import "fmt"

// sideRelay is a relay the harness runs beside the proxy to compare it
// with (PgBouncer, the floor relay): its process once started, or why its
// column is left out.
type sideRelay struct {
	name string // in messages
	p    *proc
	port int
	note string // why it is not measured, if it is not
}

// start runs start unless skip says why not, and records the outcome; it
// reports whether the relay is up.
func (r *sideRelay) start(skip string, start func() (*proc, int, error)) bool {
	if skip != "" {
		r.note = skip
		return false
	}
	p, port, err := start()
	if err != nil {
		r.note = fmt.Sprintf("%s unavailable, its column is left out: %v", r.name, err)
		fmt.Println("bench: " + r.note)
		return false
	}
	r.p, r.port = p, port
	fmt.Printf("bench: %s on 127.0.0.1:%d\n", r.name, port)
	return true
}

func (r *sideRelay) up() bool { return r.p != nil }

// target returns the port a measurement through the relay connects to and
// the process whose CPU is the relay's, or why the relay cannot be
// measured any more.
func (r *sideRelay) target() (port, pid int, err error) {
	if dead, why := r.p.exited(); dead {
		return 0, 0, fmt.Errorf("%s exited (%v): %s", r.name, why, tailFile(r.p.log, 3))
	}
	return r.port, r.p.cmd.Process.Pid, nil
}

// fail stops a relay that must not be measured and records why.
func (r *sideRelay) fail(note string) {
	r.p.stop()
	r.p = nil
	r.note = note
	fmt.Println("bench: " + note)
}

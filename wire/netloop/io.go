package netloop

import "fmt"

// IO is how a loop waits for and moves bytes.
type IO uint8

const (
	// IOAuto is io_uring where the kernel allows it (URingAvailable),
	// epoll otherwise.
	IOAuto IO = iota
	IOEpoll
	IOURing
)

// ParseIO reads "auto", "epoll" or "io_uring".
func ParseIO(s string) (IO, error) {
	switch s {
	case "auto", "":
		return IOAuto, nil
	case "epoll":
		return IOEpoll, nil
	case "io_uring", "iouring", "uring":
		return IOURing, nil
	}
	return IOAuto, fmt.Errorf("event loop I/O %q: want auto, epoll or io_uring", s)
}

func (io IO) String() string {
	switch io {
	case IOEpoll:
		return "epoll"
	case IOURing:
		return "io_uring"
	}
	return "auto"
}

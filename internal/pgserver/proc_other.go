//go:build !linux

package pgserver

import (
	"errors"
	"syscall"
)

// tieToParent: only Linux has a parent-death signal; elsewhere a server
// that outlives the proxy is stopped at the next start (stopLeftover).
func tieToParent(*syscall.SysProcAttr) {}

// postmasterOf reports whether pid is alive; without /proc the data
// directory cannot be checked.
func postmasterOf(pid int, _ string) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

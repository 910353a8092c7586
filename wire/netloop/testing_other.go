//go:build !linux

package netloop

import "errors"

// CallOnLoopThread fails here: no event loop on this system.
func CallOnLoopThread(func()) (any, error) {
	mustTest("CallOnLoopThread")
	return nil, errors.New("no event loop on this system")
}

//go:build !unix

package pgfetch

import (
	"context"
	"fmt"
	"runtime"
)

// LockFile is not available here: no package is published for such
// platforms either (Platform).
func LockFile(ctx context.Context, path string) (func(), error) {
	return nil, fmt.Errorf("pgfetch: no file locks on %s: %w", runtime.GOOS, ErrUnavailable)
}

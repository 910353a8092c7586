package pgtest

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that other goroutines (a proxy's logger, a
// command's output) may write while the test reads it. The zero value is
// ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{} // closed at the next Write (Changed)
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	return n, err
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Changed returns a channel closed at the next Write.
func (b *SyncBuffer) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

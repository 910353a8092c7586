package generator

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// benchGen returns a Generator on the system clock whose first lease holds
// n IDs however fast they are issued (at INCREMENT 1, 4096 per ms of lease),
// already taken: the benchmarks measure issuing inside a lease, which is the
// hot path of the proxy. A short lease would instead measure the 4096
// IDs/ms cap of the layout (positions run ahead of the clock at these rates).
func benchGen(b *testing.B, n int) *Generator {
	b.Helper()
	lease := time.Duration(n/(MaxCount+1)+10_000) * time.Millisecond
	g, err := New(Config{Store: NewMemStore(), LeaseDuration: lease, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close(context.Background()) })
	if _, err := g.Next(context.Background(), testKey, 1); err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkNext: one goroutine, one key (target: <= 50 ns, 0 allocs).
func BenchmarkNext(b *testing.B) {
	g := benchGen(b, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var id int64
	for range b.N {
		id, _ = g.Next(ctx, testKey, 1)
	}
	sinkPos = id
}

// BenchmarkNextParallel: 8 goroutines on one key; ns/op is wall time per ID
// (target: <= 4x BenchmarkNext).
func BenchmarkNextParallel(b *testing.B) {
	g := benchGen(b, b.N)
	b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := g.Next(ctx, testKey, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSystemClock is the floor under BenchmarkNext: one clock read.
func BenchmarkSystemClock(b *testing.B) {
	var c Clock = SystemClock{}
	var ms int64
	for b.Loop() {
		ms = c.NowMs()
	}
	sinkPos = ms
}

package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
)

// wide has a 22-bit sequence (4 M IDs per millisecond), so that no time
// limit binds: these benchmarks measure the raw cost per ID.
var wide = generator.Layout{Epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Unit: time.Millisecond,
	TimeBits: 40, WorkerBits: 1, SequenceBits: 22}

// BenchmarkUnthrottled: ns per ID with no time limit binding.
func BenchmarkUnthrottled(b *testing.B) {
	ctx := context.Background()
	b.Run("firn-next", func(b *testing.B) {
		g := newFirnGenerator(b, wide, 0)
		b.ReportAllocs()
		var s uint64
		for b.Loop() {
			id, err := g.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			s ^= id
		}
		sink = s
	})
	b.Run("firn-nextbatch", func(b *testing.B) {
		g := newFirnGenerator(b, wide, 0)
		buf := make([]uint64, 4096)
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; {
			n, err := g.NextBatch(ctx, buf[:min(len(buf), b.N-done)])
			if err != nil {
				b.Fatal(err)
			}
			done += n
		}
	})
	b.Run("firn-take", func(b *testing.B) {
		rb := newFirnRing(b, newFirnGenerator(b, wide, 0))
		defer rb.Close()
		next := ringNext(b, rb)
		warm(rb)
		b.ReportAllocs()
		b.ResetTimer()
		var s uint64
		for i := 0; i < b.N; i++ {
			s ^= next()
		}
		sink = s
	})
	b.Run("firn-taken-1000", func(b *testing.B) {
		rb := newFirnRing(b, newFirnGenerator(b, wide, 0))
		defer rb.Close()
		warm(rb)
		dst := make([]uint64, 1000)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			for got := 0; got < len(dst); {
				n, err := rb.TakeN(dst[got:])
				if errors.Is(err, ringbuffer.ErrEmpty) {
					n, err = rb.Generate(ctx, dst[got:])
				}
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*len(dst)), "ns/id")
	})
	b.Run("bwmarrin", func(b *testing.B) {
		// bwmarrin configures widths through package globals; set them to
		// the same 1-bit node and 22-bit step for this run only.
		oldNode, oldStep, oldEpoch := snowflake.NodeBits, snowflake.StepBits, snowflake.Epoch
		snowflake.NodeBits, snowflake.StepBits, snowflake.Epoch = 1, 22, wide.Epoch.UnixMilli()
		defer func() { snowflake.NodeBits, snowflake.StepBits, snowflake.Epoch = oldNode, oldStep, oldEpoch }()
		n, err := snowflake.NewNode(1)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		var s int64
		for b.Loop() {
			s ^= n.Generate().Int64()
		}
		sink = uint64(s)
	})
}

// warm lets the filler see demand and fill the ring before timing.
func warm(rb *ringbuffer.Buffer) {
	dst := make([]uint64, 1000)
	for i := 0; i < 200; i++ {
		if _, err := rb.TakeN(dst); err != nil {
			rb.Generate(context.Background(), dst)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

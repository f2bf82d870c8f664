package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
)

// textbook is the plain mutex snowflake (41 time, 10 node, 12 sequence,
// 1 ms, Twitter epoch) that waits for the next millisecond when a
// millisecond's sequence is used up: the reference every peer is held to.
type textbook struct {
	mu    sync.Mutex
	epoch time.Time
	last  int64
	seq   int64
	node  int64
}

func newTextbook() *textbook {
	return &textbook{epoch: time.UnixMilli(1288834974657), node: 1, last: -1}
}

func (t *textbook) Next() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Since(t.epoch).Milliseconds()
	if now == t.last {
		t.seq = (t.seq + 1) & 4095
		if t.seq == 0 {
			for now <= t.last {
				now = time.Since(t.epoch).Milliseconds()
			}
		}
	} else {
		t.seq = 0
	}
	t.last = now
	return uint64(now<<22 | t.node<<12 | t.seq)
}

// impl is one ID generator under test: a fresh instance per sub-benchmark.
type impl struct {
	name  string
	limit float64 // IDs per second its layout allows one worker
	firn  bool
	make  func(b *testing.B) (next func() uint64, stop func())
}

func snowflakeLayout() generator.Layout {
	l, _ := generator.Preset("snowflake")
	return l
}

// newFirnGenerator builds a generator with max-lead at its minimum of two
// units, so the measured rate is the sustained one, not borrowing.
func newFirnGenerator(b *testing.B, l generator.Layout, lead time.Duration) *generator.Generator {
	g, err := generator.New(generator.Config{Layout: l, Worker: 1, Clock: clockguard.NewSystem(),
		Floor: -1, Reserved: generator.NoReservation, MaxLead: lead})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func newFirnRing(b *testing.B, g *generator.Generator) *ringbuffer.Buffer {
	rb, err := ringbuffer.New(ringbuffer.Config{MaxStaleness: 100 * time.Millisecond, Clock: clockguard.NewSystem()})
	if err != nil {
		b.Fatal(err)
	}
	rb.Reset(g)
	rb.Start()
	return rb
}

// ringNext is the server's path: take from the ring, generate directly
// when it is empty.
func ringNext(b *testing.B, rb *ringbuffer.Buffer) func() uint64 {
	ctx := context.Background()
	return func() uint64 {
		id, err := rb.Take()
		if err == nil {
			return id
		}
		if !errors.Is(err, ringbuffer.ErrEmpty) {
			b.Error(err)
		}
		var one [1]uint64
		if _, err := rb.Generate(ctx, one[:]); err != nil {
			b.Error(err)
		}
		return one[0]
	}
}

var impls = []impl{
	{name: "firn-generator", limit: snowflakeLayout().Rate(), firn: true,
		make: func(b *testing.B) (func() uint64, func()) {
			l := snowflakeLayout()
			g := newFirnGenerator(b, l, 2*l.Unit)
			ctx := context.Background()
			return func() uint64 {
				id, err := g.Next(ctx)
				if err != nil {
					b.Error(err)
				}
				return id
			}, g.Retire
		}},
	{name: "firn-ringbuffer", limit: snowflakeLayout().Rate(), firn: true,
		make: func(b *testing.B) (func() uint64, func()) {
			l := snowflakeLayout()
			rb := newFirnRing(b, newFirnGenerator(b, l, 2*l.Unit))
			return ringNext(b, rb), rb.Close
		}},
	{name: "bwmarrin", limit: 4_096_000,
		make: func(b *testing.B) (func() uint64, func()) {
			n, err := snowflake.NewNode(1)
			if err != nil {
				b.Fatal(err)
			}
			return func() uint64 { return uint64(n.Generate().Int64()) }, func() {}
		}},
	{name: "sonyflake", limit: 25_600,
		make: func(b *testing.B) (func() uint64, func()) {
			sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
			if err != nil {
				b.Fatal(err)
			}
			return func() uint64 {
				id, err := sf.NextID()
				if err != nil {
					b.Error(err)
				}
				return id
			}, func() {}
		}},
	{name: "textbook", limit: 4_096_000,
		make: func(b *testing.B) (func() uint64, func()) {
			t := newTextbook()
			return t.Next, func() {}
		}},
}

// sink keeps results alive.
var sink uint64

// BenchmarkNextID compares firn with its peers on each one's default layout:
// serial, RunParallel at GOMAXPROCS goroutines, and 64 goroutines.
func BenchmarkNextID(b *testing.B) {
	for _, im := range impls {
		for _, mode := range []struct {
			name string
			par  int // 0: serial; else SetParallelism
		}{{"serial", 0}, {"parallel", 1}, {"64-goroutines", 32}} {
			b.Run(im.name+"/"+mode.name, func(b *testing.B) {
				next, stop := im.make(b)
				defer stop()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				if mode.par == 0 {
					var s uint64
					for i := 0; i < b.N; i++ {
						s ^= next()
					}
					sink = s
				} else {
					b.SetParallelism(mode.par)
					b.RunParallel(func(pb *testing.PB) {
						var s uint64
						for pb.Next() {
							s ^= next()
						}
						mu.Lock()
						sink ^= s
						mu.Unlock()
					})
				}
				elapsed := time.Since(start)
				b.StopTimer()
				report(b, im, b.N, elapsed)
			})
		}
	}
}

var mu sync.Mutex

func report(b *testing.B, im impl, n int, elapsed time.Duration) {
	rate := float64(n) / elapsed.Seconds()
	b.ReportMetric(rate, "ids/s")
	b.ReportMetric(100*rate/im.limit, "%limit")
	// Short calibration runs live off the lead (borrowing); judge only
	// runs long enough for the sustained rate to dominate.
	if im.firn && elapsed > 500*time.Millisecond && rate > 1.005*im.limit {
		b.Fatalf("%s issued %.0f IDs/s, above 100.5%% of its layout's limit %.0f", im.name, rate, im.limit)
	}
}

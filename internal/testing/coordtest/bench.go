package coordtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
)

// BenchAcquire measures one Acquire followed by the Release that frees
// the slot again (so the slot space never fills), reporting ms/op.
func BenchAcquire(b *testing.B, be Backend) {
	cl := be.NewCluster(b)
	c := cl.Connect(b, sysClock)
	spec := Spec("bench-acquire", 1024)
	n := Node("bench")
	ctx := context.Background()
	mustAcquire(b, c, spec, n).Release(ctx, -1) // pin and session outside the timing
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := c.Acquire(ctx, spec, n)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := l.Release(ctx, int64(i)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchReserve measures one fenced Reserve (with its heartbeat), ms/op.
func BenchReserve(b *testing.B, be Backend) {
	cl := be.NewCluster(b)
	c := cl.Connect(b, sysClock)
	n := Node("bench")
	l := mustAcquire(b, c, Spec("bench-reserve", 4), n)
	ctx := context.Background()
	hb := Beat(n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := l.Reserve(ctx, int64(i+1), hb); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchWrites measures coordinator writes per second per generator, with
// two generators, over FIRN_WRITES_SECONDS (default 60), idle and at full
// load, and fails a rate above 1.05 plus one write per window (a write at
// each edge of a short window): the target is one reservation write a
// second per generator whatever the load. The test command runs it for
// 5 s per backend. Run with -benchtime 1x.
func BenchWrites(b *testing.B, be Backend) {
	d := 60 * time.Second
	if s := os.Getenv("FIRN_WRITES_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("FIRN_WRITES_SECONDS=%q: want a whole number of seconds, at least 1", s)
		}
		d = time.Duration(n) * time.Second
	}
	limit := 1.05 + 1/d.Seconds()
	for _, load := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "load"}[load]
		b.Run(name, func(b *testing.B) {
			rate, ids := WriteRate(b, be, 2, d, load)
			b.ReportMetric(rate, "writes/s/gen")
			b.ReportMetric(float64(ids)/d.Seconds(), "ids/s")
			if rate > limit {
				b.Errorf("%.2f coordinator writes/s per generator %s over %v, target 1 (fails above %.3f)", rate, name, d, limit)
			}
		})
	}
}

// WriteRate runs gens generators on one coordinator, each on its own lease
// with a Reserver at the default interval and window, for d (idle, or with
// every generator driven as fast as it goes when load), and returns the
// coordinator writes per second per generator (the delta of
// Cluster.Revision) and the IDs issued.
func WriteRate(tb testing.TB, be Backend, gens int, d time.Duration, load bool) (float64, uint64) {
	lay, _ := generator.Preset("snowflake")
	cl := be.NewCluster(tb)
	c := cl.Connect(tb, sysClock)
	timing := coordinator.DefaultTiming()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var gs []*generator.Generator
	var rss []*coordinator.Reserver
	for i := 0; i < gens; i++ {
		n := Node(fmt.Sprintf("w%d", i))
		spec := coordinator.Spec{Generator: fmt.Sprintf("rate%d", i), Layout: lay.String(), WorkerLimit: lay.WorkerLimit(),
			DatacenterLimit: lay.DatacenterLimit(), Datacenter: -1, MaxFloor: bigFloor, LocalFloor: -1}
		l := mustAcquire(tb, c, spec, n)
		g, err := generator.New(generator.Config{Layout: lay, Worker: l.WorkerID(), Datacenter: l.Datacenter(),
			Clock: sysClock, Floor: l.Floor(), Reserved: max(l.Floor(), 0)})
		if err != nil {
			tb.Fatal(err)
		}
		rs, err := coordinator.NewReserver(coordinator.ReserverConfig{
			Lease: l, Node: n, Clock: sysClock,
			Now:     func() int64 { w, _ := sysClock.Now(); return lay.Units(w) },
			Logical: g.Logical, OnAck: g.SetReserved, MaxUntil: lay.MaxTime(),
			Window: int64(timing.ReservationWindow / lay.Unit), Interval: timing.RefreshInterval,
		})
		if err != nil {
			tb.Fatal(err)
		}
		gs, rss = append(gs, g), append(rss, rs)
		wg.Add(1)
		go func() { defer wg.Done(); _ = rs.Run(ctx) }()
	}
	// Let the first reservations land before counting.
	time.Sleep(1500 * time.Millisecond)
	if load {
		for _, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]uint64, 256)
				for ctx.Err() == nil {
					_, _ = g.NextBatch(ctx, buf)
				}
			}()
		}
	}
	before := cl.Revision(tb)
	var issued0 uint64
	for _, g := range gs {
		issued0 += g.Issued()
	}
	time.Sleep(d)
	after := cl.Revision(tb)
	var issued uint64
	for _, g := range gs {
		issued += g.Issued()
	}
	cancel()
	for _, g := range gs {
		g.Retire()
	}
	return float64(after-before) / d.Seconds() / float64(gens), issued - issued0
}

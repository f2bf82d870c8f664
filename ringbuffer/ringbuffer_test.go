package ringbuffer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// counter is a Source of increasing IDs, perCall at a time.
type counter struct {
	next    atomic.Uint64
	perCall int
	fail    atomic.Bool
}

func (c *counter) NextBatch(ctx context.Context, dst []uint64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.fail.Load() {
		return 0, errors.New("source refuses")
	}
	n := min(len(dst), c.perCall)
	start := c.next.Add(uint64(n)) - uint64(n)
	for i := range n {
		dst[i] = start + uint64(i) + 1
	}
	return n, nil
}

type fakeClock struct {
	mu   sync.Mutex
	mono time.Duration
}

func (c *fakeClock) Now() (time.Time, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Unix(0, int64(c.mono)), c.mono
}
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.mono += d; c.mu.Unlock() }

// sysClock reads the machine's clock as clockguard.System does, its
// monotonic-only reading too (what a node's takes read).
type sysClock struct{ origin time.Time }

func (c sysClock) Now() (time.Time, time.Duration) {
	t := time.Now()
	return t.Round(0), t.Sub(c.origin)
}

func (c sysClock) FastMono() (time.Duration, bool) { return time.Since(c.origin), true }

func newBuf(t testing.TB, cfg Config) *Buffer {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = sysClock{time.Now()}
	}
	if cfg.MaxStaleness == 0 {
		cfg.MaxStaleness = time.Second
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestNewRefuses(t *testing.T) {
	clk := &fakeClock{}
	cases := []struct {
		name string
		cfg  Config
	}{
		{"not a power of two", Config{Size: 1000, MaxStaleness: time.Second, Clock: clk}},
		{"too small", Config{Size: 64, MaxStaleness: time.Second, Clock: clk}},
		{"no staleness", Config{Size: 1024, Clock: clk}},
		{"tick above staleness", Config{Size: 1024, MaxStaleness: time.Millisecond, Tick: time.Second, Clock: clk}},
		{"no clock", Config{Size: 1024, MaxStaleness: time.Second}},
		{"chunk above size", Config{Size: 1024, MaxStaleness: time.Second, Clock: clk, Chunk: 2048}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(c.cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}

func TestEmptyAtOnceAndGenerate(t *testing.T) {
	b := newBuf(t, Config{Size: 1024})
	if _, err := b.Take(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Take on a new buffer = %v, want ErrEmpty", err)
	}
	dst := make([]uint64, 10)
	if _, err := b.Generate(context.Background(), dst); !errors.Is(err, ErrNoSource) {
		t.Fatalf("Generate without source = %v", err)
	}
	src := &counter{perCall: 3}
	b.Reset(src)
	n, err := b.Generate(context.Background(), dst)
	if err != nil || n != 10 || dst[0] != 1 || dst[9] != 10 {
		t.Fatalf("Generate = %d %v %v", n, err, dst)
	}
	if s := b.Stats(); s.Direct != 10 || s.EmptyHits != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFillAndTake(t *testing.T) {
	b := newBuf(t, Config{Size: 1024, Chunk: 100})
	b.Reset(&counter{perCall: 37})
	b.target.Store(600)
	b.fill(600)
	if b.Len() != 600 {
		t.Fatalf("Len after fill = %d", b.Len())
	}
	dst := make([]uint64, 250)
	var all []uint64
	for {
		n, err := b.TakeN(dst)
		if errors.Is(err, ErrEmpty) {
			break
		}
		all = append(all, dst[:n]...)
	}
	if len(all) != 600 {
		t.Fatalf("took %d, want 600", len(all))
	}
	for i, id := range all {
		if id != uint64(i+1) {
			t.Fatalf("ID %d = %d", i, id)
		}
	}
	if s := b.Stats(); s.Taken != 600 || s.Refills != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentTakers: one running filler, many takers mixing Take, TakeN
// and Generate; no ID twice, each taker's IDs strictly increase.
func TestConcurrentTakers(t *testing.T) {
	b := newBuf(t, Config{Size: 4096, Chunk: 512})
	src := &counter{perCall: 512}
	b.Reset(src)
	b.Start()
	const takers, each = 8, 100_000
	out := make([][]uint64, takers)
	var wg sync.WaitGroup
	for w := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]uint64, 0, each)
			dst := make([]uint64, 1+w*37)
			for len(ids) < each {
				want := dst[:min(len(dst), each-len(ids))]
				var n int
				var err error
				if len(want) == 1 {
					var id uint64
					id, err = b.Take()
					want[0], n = id, 1
				} else {
					n, err = b.TakeN(want)
				}
				if errors.Is(err, ErrEmpty) {
					n, err = b.Generate(context.Background(), want)
				}
				if err != nil {
					t.Error(err)
					return
				}
				ids = append(ids, want[:n]...)
			}
			out[w] = ids
		}()
	}
	wg.Wait()
	checkUnique(t, out)
	if s := b.Stats(); s.Refills == 0 || s.Taken == 0 {
		t.Fatalf("filler never served: %+v", s)
	}
}

func checkUnique(t *testing.T, out [][]uint64) {
	t.Helper()
	var all []uint64
	for w, ids := range out {
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("taker %d: %d after %d", w, ids[i], ids[i-1])
			}
		}
		all = append(all, ids...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("ID %d handed out twice", all[i])
		}
	}
}

// TestParkedTaker is the ring's one hard case: a taker parked between
// claiming and copying while the filler wraps the ring and Reset runs. No
// ID is returned twice, and the filler never writes over the parked slots.
func TestParkedTaker(t *testing.T) {
	b := newBuf(t, Config{Size: 256, Chunk: 64})
	src := &counter{perCall: 64}
	b.Reset(src)
	b.fill(256) // ring full: positions 0..255 hold IDs 1..256

	parked := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	b.testHookClaimed = func() {
		once.Do(func() {
			close(parked)
			<-release
		})
	}
	var parkedIDs []uint64
	parkedDone := make(chan struct{})
	go func() {
		defer close(parkedDone)
		dst := make([]uint64, 10)
		n, err := b.TakeN(dst) // claims positions 0..9, then parks
		if err == nil {
			parkedIDs = append(parkedIDs, dst[:n]...)
		}
	}()
	<-parked
	b.testHookClaimed = nil // other takers do not park

	var others []uint64
	take := func() {
		dst := make([]uint64, 7)
		for {
			n, err := b.TakeN(dst)
			if err != nil {
				return
			}
			others = append(others, dst[:n]...)
		}
	}
	take() // drains positions 10..255
	// The filler wraps to block 0, which the parked taker still holds: it
	// writes nothing there (nor past it: the ring is in order).
	b.fill(256)
	if got := b.Len(); got != 0 {
		t.Fatalf("filler wrote %d slots over or past a parked taker", got)
	}
	take()
	// Reset while the taker is parked: its IDs belong to a retired epoch.
	b.Reset(&counter{perCall: 64, next: atomicAt(1_000_000)})
	b.fill(256)
	take()
	close(release)
	<-parkedDone
	if len(parkedIDs) != 0 {
		t.Fatalf("parked taker returned retired IDs %v", parkedIDs)
	}
	// Once released, the filler reaches block 0 again.
	b.fill(256)
	take()
	checkUnique(t, [][]uint64{others})
	if s := b.Stats(); s.DroppedReset == 0 {
		t.Fatalf("no retired IDs counted: %+v", s)
	}
}

// TestParkedTakerNoReset: the parked taker's IDs are still handed out (to it
// alone) when no Reset intervenes.
func TestParkedTakerNoReset(t *testing.T) {
	b := newBuf(t, Config{Size: 128, Chunk: 64})
	b.Reset(&counter{perCall: 64})
	b.fill(128)
	parked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.testHookClaimed = func() { once.Do(func() { close(parked); <-release }) }
	var got []uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		dst := make([]uint64, 5)
		n, _ := b.TakeN(dst)
		got = dst[:n]
	}()
	<-parked
	b.testHookClaimed = nil
	var others []uint64
	for round := 0; round < 5; round++ {
		dst := make([]uint64, 3)
		for {
			n, err := b.TakeN(dst)
			if err != nil {
				break
			}
			others = append(others, dst[:n]...)
		}
		b.fill(128)
	}
	close(release)
	<-done
	if len(got) != 5 || got[0] != 1 {
		t.Fatalf("parked taker got %v", got)
	}
	checkUnique(t, [][]uint64{append(append([]uint64{}, got...), others...)})
}

func atomicAt(v uint64) (a atomic.Uint64) { a.Store(v); return }

func TestResetRejectsRetiredSource(t *testing.T) {
	b := newBuf(t, Config{Size: 1024, Chunk: 64})
	old := &counter{perCall: 64}
	b.Reset(old)
	b.fill(512)
	b.Reset(&counter{perCall: 64, next: atomicAt(10_000)})
	if b.Len() != 0 {
		t.Fatalf("Reset left %d retired IDs", b.Len())
	}
	b.fill(128)
	id, err := b.Take()
	if err != nil || id <= 10_000 {
		t.Fatalf("after Reset Take = %d, %v; want an ID of the new source", id, err)
	}
	if s := b.Stats(); s.DroppedReset != 512 {
		t.Fatalf("DroppedReset = %d", s.DroppedReset)
	}
}

func TestStaleDropped(t *testing.T) {
	clk := &fakeClock{}
	b := newBuf(t, Config{Size: 1024, MaxStaleness: 100 * time.Millisecond, Tick: 10 * time.Millisecond, Clock: clk, Chunk: 64})
	b.Reset(&counter{perCall: 64})
	b.fill(128)
	clk.Advance(50 * time.Millisecond)
	b.tick.Store(b.nowTick())
	if _, err := b.Take(); err != nil {
		t.Fatalf("50ms old: %v", err)
	}
	// Age 110 ms > MaxStaleness: dropped at take, even before the filler
	// purges.
	clk.Advance(60 * time.Millisecond)
	b.tick.Store(b.nowTick())
	if id, err := b.Take(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("stale Take = %d, %v; want ErrEmpty", id, err)
	}
	if s := b.Stats(); s.DroppedStale != 127 {
		t.Fatalf("DroppedStale = %d, want 127", s.DroppedStale)
	}
	// The filler's round purges stale chunks at the head.
	b.fill(64)
	clk.Advance(200 * time.Millisecond)
	b.round()
	if b.Len() != 0 {
		t.Fatalf("round left %d stale IDs", b.Len())
	}
}

// fastFakeClock is a fakeClock with a monotonic-only reading, as
// clockguard's clocks have.
type fastFakeClock struct{ fakeClock }

func (c *fastFakeClock) FastMono() (time.Duration, bool) { _, m := c.Now(); return m, true }

// TestTakeJudgesByItsOwnReading: a take judges freshness by the clock as it
// takes, not by the tick the filler last set. The filler is not running
// here, as on a starved machine whose filler timer fires late: IDs older
// than MaxStaleness are dropped, not handed out (when takes trusted the
// filler's tick, this ring handed out IDs 115 ms old with MaxStaleness
// 100 ms, and any age at all while the filler stayed away), and the take
// publishes the tick it read.
func TestTakeJudgesByItsOwnReading(t *testing.T) {
	type clock interface {
		Clock
		Advance(time.Duration)
	}
	for _, tc := range []struct {
		name string
		clk  func() clock
	}{{"Now", func() clock { return &fakeClock{} }}, {"FastMono", func() clock { return &fastFakeClock{} }}} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/batch=%v", tc.name, batch), func(t *testing.T) {
				clk := tc.clk()
				b := newBuf(t, Config{Size: 1024, MaxStaleness: 100 * time.Millisecond, Tick: 10 * time.Millisecond, Clock: clk, Chunk: 64})
				b.Reset(&counter{perCall: 64})
				b.fill(128) // stamped at tick 0
				take := func() (uint64, error) {
					if !batch {
						return b.Take()
					}
					var one [1]uint64
					_, err := b.TakeN(one[:])
					return one[0], err
				}
				clk.Advance(95 * time.Millisecond) // tick 9: 9 ticks old, within the bound
				if id, err := take(); err != nil || id != 1 {
					t.Fatalf("95 ms old: Take = %d, %v; want 1", id, err)
				}
				clk.Advance(20 * time.Millisecond) // tick 11: past MaxStaleness
				if id, err := take(); !errors.Is(err, ErrEmpty) {
					t.Fatalf("115 ms old, the filler's tick never advanced: Take = %d, %v; want ErrEmpty (stale IDs dropped)", id, err)
				}
				if s := b.Stats(); s.DroppedStale != 127 {
					t.Fatalf("DroppedStale = %d, want 127", s.DroppedStale)
				}
				if got := b.tick.Load(); got != 11 {
					t.Fatalf("shared tick %d after a take at tick 11", got)
				}
			})
		}
	}
}

// TestFreshnessBound: with a running filler on the real clock, no ID is
// handed out later than MaxStaleness + one tick after its chunk was made.
func TestFreshnessBound(t *testing.T) {
	const stale, tick = 40 * time.Millisecond, 10 * time.Millisecond
	origin := time.Now()
	b := newBuf(t, Config{Size: 1024, MaxStaleness: stale, Tick: tick, Clock: sysClock{origin}, Chunk: 64})
	src := &stampSource{origin: origin}
	b.Reset(src)
	b.Start()
	deadline := time.Now().Add(600 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		id, err := b.Take()
		if errors.Is(err, ErrEmpty) {
			time.Sleep(time.Millisecond)
			continue
		}
		age := time.Since(origin) - time.Duration(id)
		if age > stale+tick {
			t.Fatalf("ID made %v ago handed out (bound %v)", age, stale+tick)
		}
		if i%50 == 0 {
			time.Sleep(70 * time.Millisecond) // let buffered IDs age
		}
	}
	if b.Stats().DroppedStale == 0 {
		t.Fatal("nothing went stale: the test did not exercise the bound")
	}
}

// TestTickAdvancesAtTickStart (virtual time): the filler's timer fires at
// the start of each tick, so the tick takers compare stamps with is the
// clock's as soon as a tick begins — not up to a tick later, which let an
// ID of MaxStaleness plus a tick plus the timer's lateness out
// (TestFreshnessBound under load). The filler first runs 3 ms into tick 0;
// 1 ms into tick 1 the takers' tick must be 1.
func TestTickAdvancesAtTickStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 10 * time.Millisecond
		origin := time.Now()
		b := newBuf(t, Config{Size: 1024, MaxStaleness: 4 * tick, Tick: tick, Clock: sysClock{origin}, Chunk: 64})
		b.Reset(&stampSource{origin: origin})
		b.Start()
		time.Sleep(3 * time.Millisecond)
		b.Take() // empty: wakes the filler, which fills and arms its timer
		synctest.Wait()
		if b.Len() == 0 {
			t.Fatal("the filler did not fill the ring")
		}
		time.Sleep(tick - 3*time.Millisecond + time.Millisecond)
		synctest.Wait()
		if got := b.tick.Load(); got != 1 {
			t.Fatalf("at %v the takers' tick is %d, want 1 (the timer set a tick after the last round, not at the tick's start)",
				time.Since(origin), got)
		}
	})
}

// stampSource makes IDs that are their own creation time (ns since origin),
// kept increasing.
type stampSource struct {
	origin time.Time
	last   uint64
}

func (s *stampSource) NextBatch(_ context.Context, dst []uint64) (int, error) {
	now := uint64(time.Since(s.origin))
	for i := range dst {
		now = max(now, s.last+1)
		dst[i], s.last = now, now
	}
	return len(dst), nil
}

func TestDemandSizedAndIdle(t *testing.T) {
	clk := &fakeClock{}
	b := newBuf(t, Config{Size: 1 << 14, MaxStaleness: 100 * time.Millisecond, Clock: clk})
	b.Reset(&counter{perCall: 4096})
	b.round()
	if b.Len() != 0 || b.target.Load() != 0 {
		t.Fatalf("no demand yet, but target %d len %d", b.target.Load(), b.Len())
	}
	// 20,000 IDs in 100 ms: 200k IDs/s → target 10,000.
	dst := make([]uint64, 1000)
	for range 20 {
		b.Generate(context.Background(), dst)
	}
	clk.Advance(100 * time.Millisecond)
	if !b.round() {
		t.Fatal("timer stopped under demand")
	}
	if tg := b.target.Load(); tg < 9000 || tg > 11000 {
		t.Fatalf("target %d, want about 10000", tg)
	}
	if b.Len() < 9000 {
		t.Fatalf("filled %d", b.Len())
	}
	// Demand stops: stale IDs are purged, the target falls to zero and
	// the timer stops.
	idle := false
	for range 100 {
		clk.Advance(100 * time.Millisecond)
		if !b.round() {
			idle = true
			break
		}
	}
	if !idle || b.Len() != 0 || b.target.Load() != 0 {
		t.Fatalf("not idle: len %d target %d", b.Len(), b.target.Load())
	}
}

func TestTakeAllocatesNothing(t *testing.T) {
	b := newBuf(t, Config{Size: 1 << 16, Chunk: 4096})
	b.Reset(&counter{perCall: 4096})
	b.fill(1 << 16)
	dst := make([]uint64, 100)
	if a := testing.AllocsPerRun(200, func() { b.TakeN(dst) }); a != 0 {
		t.Fatalf("TakeN allocates %v", a)
	}
	if a := testing.AllocsPerRun(200, func() { b.Take() }); a != 0 {
		t.Fatalf("Take allocates %v", a)
	}
}

// BenchmarkTake is one taker taking from the ring while its filler keeps
// it full, and reports the share of takes that found it empty. A miss is
// served as the node serves it: miss-generate generates one ID directly
// (Generate), miss-yield lets the filler run first (runtime.Gosched), as a
// node's handler does by waiting on its connection between calls.
//
//	go test -run '^$' -bench BenchmarkTake -cpu 1,2 ./ringbuffer/
//
// At -cpu 1 the filler runs only when the taker lets it: a taker that
// never blocks (miss-generate) finds the ring empty after its first
// refill until the scheduler preempts it (10 ms), and pays Generate's
// lock per ID for most of each slice. A node on one CPU does not: its
// handlers wait for the network, the filler runs when poked, and at 16
// and 64 callers its takes found the ring empty 2 times in 680,000 calls
// (the first two; docs/performance.md).
func BenchmarkTake(b *testing.B) {
	for _, mode := range []string{"miss-generate", "miss-yield"} {
		b.Run(mode, func(b *testing.B) {
			buf := newBuf(b, Config{Size: 1 << 16, Chunk: 4096})
			buf.Reset(&counter{perCall: 4096})
			buf.Start()
			one := make([]uint64, 1)
			misses := 0
			b.ReportAllocs()
			for b.Loop() {
				for {
					if _, err := buf.Take(); err == nil {
						break
					}
					misses++
					if mode == "miss-generate" {
						buf.Generate(context.Background(), one)
						break
					}
					runtime.Gosched()
				}
			}
			b.ReportMetric(float64(misses)/float64(b.N), "misses/op")
		})
	}
}

// bulkCounter is a counter whose TryBulk gives at most avail IDs until
// AwaitBulk allows more.
type bulkCounter struct {
	counter
	avail  atomic.Int64
	awaits atomic.Int64
}

func (c *bulkCounter) TryBulk(dst []uint64) (int, error) {
	n := min(len(dst), int(c.avail.Load()))
	if n == 0 {
		return 0, nil
	}
	n, err := c.NextBatch(context.Background(), dst[:n])
	c.avail.Add(int64(-n))
	return n, err
}

func (c *bulkCounter) AwaitBulk(ctx context.Context) error {
	c.awaits.Add(1)
	c.avail.Store(5)
	return ctx.Err()
}

// GenerateBulk takes what the source gives without waiting, returns the
// source's AwaitBulk when it falls short, and falls back to Generate for a
// source that is not a BulkSource.
func TestGenerateBulk(t *testing.T) {
	b := newBuf(t, Config{Size: 1024})
	src := &bulkCounter{counter: counter{perCall: 3}}
	src.avail.Store(7)
	b.Reset(src)
	dst := make([]uint64, 10)
	n, await, err := b.GenerateBulk(context.Background(), dst)
	if err != nil || n != 7 || await == nil || dst[6] != 7 {
		t.Fatalf("GenerateBulk short of the source = %d, await %v, %v; want 7 and an await", n, await != nil, err)
	}
	if err := await(context.Background()); err != nil || src.awaits.Load() != 1 {
		t.Fatalf("await: %v (%d awaits)", err, src.awaits.Load())
	}
	n, await, err = b.GenerateBulk(context.Background(), dst[7:])
	if err != nil || n != 3 || await != nil || dst[9] != 10 {
		t.Fatalf("GenerateBulk after the await = %d, await %v, %v; want the 3 left and no await", n, await != nil, err)
	}
	b.Reset(&counter{perCall: 4})
	if n, await, err := b.GenerateBulk(context.Background(), dst); err != nil || n != 10 || await != nil {
		t.Fatalf("GenerateBulk on a plain source = %d, await %v, %v; want Generate's 10", n, await != nil, err)
	}
}

// Invalidate drops what is buffered without the filler's lock — also
// while a Generate holds it waiting on its source — and keeps the source.
func TestInvalidate(t *testing.T) {
	b := newBuf(t, Config{Size: 1024, Chunk: 64})
	b.Reset(&counter{perCall: 64})
	b.fill(512)
	b.fillLock <- struct{}{} // as a Generate waiting on its source would
	done := make(chan struct{})
	go func() { b.Invalidate(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Invalidate waited for the filler's lock")
	}
	<-b.fillLock
	if b.Len() != 0 {
		t.Fatalf("Invalidate left %d IDs", b.Len())
	}
	b.fill(64)
	id, err := b.Take()
	if err != nil || id <= 512 {
		t.Fatalf("after Invalidate Take = %d, %v; want a newer ID of the same source", id, err)
	}
	if s := b.Stats(); s.DroppedReset != 512 {
		t.Fatalf("stats %+v: want the 512 dropped counted", s)
	}
}

// slowStamp is a source whose IDs are their creation time on clk's
// monotonic reading (kept increasing). The filler's TryBatch answers at
// once; a direct NextBatch first waits (the generator at its lead limit,
// or waiting for its reservation) — modelled by moving the fake clock.
type slowStamp struct {
	clk  *fakeClock
	wait time.Duration
	last uint64
}

func (s *slowStamp) stamp(dst []uint64) int {
	_, m := s.clk.Now()
	now := uint64(m)
	for i := range dst {
		now = max(now, s.last+1)
		dst[i], s.last = now, now
	}
	return len(dst)
}

func (s *slowStamp) TryBatch(dst []uint64) (int, error) { return s.stamp(dst), nil }
func (s *slowStamp) NextBatch(_ context.Context, dst []uint64) (int, error) {
	s.clk.Advance(s.wait)
	return s.stamp(dst), nil
}

// Generate drains the ring first, then waits in the source for the rest;
// the IDs it drained are handed out when it returns, and none may then be
// older than MaxStaleness plus one tick (docs/design.md, Ring buffer).
// Before, the drained IDs were handed out whatever the wait had made of
// them: here 300 ms old against a bound of 110 ms. Now they are dropped
// (counted stale) and the source gives the rest.
func TestGenerateKeepsRingIDsFresh(t *testing.T) {
	const stale, tick = 100 * time.Millisecond, 10 * time.Millisecond
	clk := &fakeClock{}
	clk.Advance(time.Second)
	b := newBuf(t, Config{Size: 1024, MaxStaleness: stale, Tick: tick, Clock: clk, Chunk: 64})
	src := &slowStamp{clk: clk, wait: 300 * time.Millisecond}
	b.Reset(src)
	b.fill(64) // 64 IDs in the ring, made now
	dst := make([]uint64, 100)
	_, began := clk.Now() // IDs made before it came from the ring
	n, err := b.Generate(context.Background(), dst)
	if err != nil || n != 100 {
		t.Fatalf("Generate = %d, %v", n, err)
	}
	_, now := clk.Now()
	if got := b.Stats().DroppedStale; got != 64 {
		t.Fatalf("DroppedStale %d, want the 64 IDs taken from the ring", got)
	}
	for i, id := range dst[:n] {
		if i > 0 && id <= dst[i-1] {
			t.Fatalf("ID %d (%d) not above the one before (%d)", i, id, dst[i-1])
		}
		if age := now - time.Duration(id); time.Duration(id) < began && age > stale+tick {
			t.Fatalf("ID %d of %d handed out %v after it was made (bound %v); %d of the IDs came from the ring",
				i, n, age, stale+tick, 64)
		}
	}
}

// Generate drops the IDs it took from the ring only when the drain emptied
// the ring: had the ring filled dst, it may hold more, and IDs the source
// gave in place of the dropped ones would lie above those, which the next
// take hands out. Here the clock moves past the first chunk's bound while
// the drain copies it (as a loaded machine can): the first draft of the
// freshness check dropped the 64 IDs, had the source give 64 above the 64
// still in the ring, and a later take went back below them (seen first
// as a wide generator's NextIDs out of order in TestWideMembersRejoinServing).
func TestGenerateDropsOnlyWhatItEmptied(t *testing.T) {
	const stale, tick = 100 * time.Millisecond, 10 * time.Millisecond
	clk := &fakeClock{}
	clk.Advance(time.Second)
	b := newBuf(t, Config{Size: 1024, MaxStaleness: stale, Tick: tick, Clock: clk, Chunk: 64})
	src := &slowStamp{clk: clk}
	b.Reset(src)
	b.fill(64)
	clk.Advance(stale - tick) // the first chunk at the edge of its bound
	b.fill(64)
	moved := false
	b.testHookClaimed = func() {
		if !moved {
			moved = true
			clk.Advance(2 * tick)
		}
	}
	dst := make([]uint64, 64)
	if n, err := b.Generate(context.Background(), dst); err != nil || n != 64 {
		t.Fatalf("Generate = %d, %v", n, err)
	}
	b.testHookClaimed = nil
	rest := make([]uint64, 64)
	n, err := b.TakeN(rest)
	if err != nil {
		t.Fatal(err)
	}
	all := append(dst, rest[:n]...)
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Fatalf("ID %d (%d) not above ID %d (%d): Generate's IDs lie above what the ring still held", i, all[i], i-1, all[i-1])
		}
	}
}

package ringbuffer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Source produces IDs in increasing order. The generator's NextBatch
// satisfies it: it fills dst with as many IDs as one time unit allows and
// may wait (honouring ctx).
type Source interface {
	NextBatch(ctx context.Context, dst []uint64) (int, error)
}

// TrySource is a Source that can say it has nothing right now instead of
// waiting: TryBatch fills dst with what can be produced at once and
// returns 0 (and no error) when more would need a wait. The filler uses it
// so that it never waits while it holds the lock callers take (the
// generator's TryBatch satisfies it).
type TrySource interface {
	Source
	TryBatch(dst []uint64) (int, error)
}

// BulkSource is a Source with a lower lead limit for large requests:
// TryBulk produces without waiting and leaves the edge of the lead to
// NextBatch and TryBatch; AwaitBulk waits, producing nothing, until
// TryBulk can produce (the generator satisfies it).
type BulkSource interface {
	Source
	TryBulk(dst []uint64) (int, error)
	AwaitBulk(ctx context.Context) error
}

// Clock supplies the monotonic reading that stamps refill chunks. The
// clockguard clocks satisfy it; the wall reading is not used.
type Clock interface {
	Now() (wall time.Time, mono time.Duration)
}

// fastMono is a Clock's monotonic reading alone, where it has one
// (clockguard's clocks do): one clock read instead of Now's two. Takes
// read it; a Clock without it is read with Now.
type fastMono interface {
	FastMono() (mono time.Duration, ok bool)
}

// Errors, checked with errors.Is.
var (
	// ErrEmpty: the buffer holds no fresh ID right now. Take returns it at
	// once; callers generate directly (Generate) instead.
	ErrEmpty = errors.New("ringbuffer: empty")
	// ErrNoSource: there is no source (none set, or Reset with nil).
	ErrNoSource = errors.New("ringbuffer: no source")
	// ErrClosed: the buffer was closed.
	ErrClosed = errors.New("ringbuffer: closed")
	// ErrConfig marks a refused Config.
	ErrConfig = errors.New("ringbuffer: invalid config")
)

// blockSize is the release granularity: takers release slots to the filler
// by adding to one counter per block of this many slots.
const blockSize = 64

// Config configures a Buffer.
type Config struct {
	// Size is the number of slots: a power of two, at least 2×64.
	// Zero means 65536.
	Size int
	// MaxStaleness bounds the age of any ID handed out (plus one Tick).
	// Required.
	MaxStaleness time.Duration
	// Tick is the coarse freshness tick. Zero means MaxStaleness/4,
	// at least 1ms. Must not exceed MaxStaleness/2.
	Tick time.Duration
	// Clock stamps refill chunks with its monotonic reading. Required.
	Clock Clock
	// Chunk is how many IDs one refill asks of the source at a time.
	// Zero means min(4096, Size/2).
	Chunk int
}

// Stats are plain counters; the node turns them into metrics.
type Stats struct {
	Capacity     int    // slots
	Available    int    // IDs buffered now (stale ones included until dropped)
	Target       int    // what the filler keeps ready, sized to demand
	Taken        uint64 // IDs handed out from the ring
	Direct       uint64 // IDs generated directly by Generate
	DroppedStale uint64 // IDs dropped for exceeding MaxStaleness
	DroppedReset uint64 // IDs dropped by Reset (a retired source)
	EmptyHits    uint64 // takes that found the ring empty
	Refills      uint64 // refill rounds that added IDs
	RefillErrors uint64 // refill rounds the source refused
}

// Each slot is an ID in ids and its metadata in meta, kept apart so that a
// batch take checks 8 bytes of metadata per ID and then copies the IDs as
// one block. Lap, epoch and stamp are kept modulo their widths: a taker
// compares them only with the current lap, epoch and tick, which they can
// never lag by a full wrap (2^16 laps, 2^16 Resets, 2^31 ticks).
type meta struct {
	stamp    uint32 // freshness tick of the chunk this ID came from (mod 2^32)
	lapEpoch uint32 // lap (position / size) << 16 | Reset epoch, both mod 2^16
}

func lapEpoch(pos uint64, shift uint, epoch uint32) uint32 {
	return uint32(uint16(pos>>shift))<<16 | uint32(uint16(epoch))
}

// fresh reports whether a stamp is within staleTicks of tick (wrap-safe).
func fresh(stamp uint32, tick int64, staleTicks int64) bool {
	return int64(int32(uint32(tick)-stamp)) <= staleTicks
}

type pad [64]byte

// Buffer is a ring of pre-generated IDs with one filler and many
// concurrent takers. Taking takes no lock. Create one with New, then
// Start it.
type Buffer struct {
	ids      []uint64
	meta     []meta
	released []atomic.Uint64 // per block: slots released, cumulative
	mask     uint64
	size     uint64
	lapShift uint
	// staleTicks is read by every take: it sits with the other fields
	// fixed at New, away from the counters the filler writes.
	staleTicks int64

	_    pad
	head atomic.Uint64 // next position to take (takers CAS it)
	_    pad
	tail atomic.Uint64 // next position to fill (written by the filler only)
	_    pad
	tick atomic.Int64 // coarse freshness tick, advanced by the filler
	// epoch is the current Reset generation.
	epoch atomic.Uint32
	// target is the fill target; takers wake the filler under half of it.
	target atomic.Int64
	_      pad

	emptyHits    atomic.Uint64
	droppedStale atomic.Uint64
	droppedReset atomic.Uint64
	direct       atomic.Uint64
	refills      atomic.Uint64
	refillErrors atomic.Uint64

	tickDur time.Duration
	chunk   int
	clock   Clock
	fast    fastMono // clock's monotonic-only reading, or nil

	// fillLock is held while filling, by Generate and by Reset: a channel
	// used as a lock, so that Generate takes it with its caller's context.
	fillLock   chan struct{}
	src        Source
	scratch    []uint64
	lastSample sampler

	wake    chan struct{}
	closed  chan struct{}
	done    chan struct{}
	started atomic.Bool
	isClose atomic.Bool

	// testHookClaimed, when set, runs after a taker claimed positions and
	// before it copies them (tests park takers there).
	testHookClaimed func()
}

// New returns a buffer with no source. It returns an error wrapping
// ErrConfig, naming the field and its bound, when Size (0: 65,536) is not a
// power of two between two blocks and 2^30, MaxStaleness is not positive,
// Tick (0: a quarter of MaxStaleness, at least 1 ms) is outside
// (0, MaxStaleness/2], Clock is nil, or Chunk (0: 4,096 or half the Size)
// is outside [1, Size].
func New(cfg Config) (*Buffer, error) {
	if cfg.Size == 0 {
		cfg.Size = 1 << 16
	}
	if cfg.Size < 2*blockSize || cfg.Size&(cfg.Size-1) != 0 || cfg.Size > 1<<30 {
		return nil, fmt.Errorf("%w: ring-size %d is not a power of two in [%d, %d]", ErrConfig, cfg.Size, 2*blockSize, 1<<30)
	}
	if cfg.MaxStaleness <= 0 {
		return nil, fmt.Errorf("%w: max-staleness %v must be positive", ErrConfig, cfg.MaxStaleness)
	}
	if cfg.Tick == 0 {
		cfg.Tick = max(cfg.MaxStaleness/4, time.Millisecond)
	}
	if cfg.Tick <= 0 || 2*cfg.Tick > cfg.MaxStaleness {
		return nil, fmt.Errorf("%w: tick %v outside (0, max-staleness/2 = %v]", ErrConfig, cfg.Tick, cfg.MaxStaleness/2)
	}
	if cfg.Clock == nil {
		return nil, fmt.Errorf("%w: Clock is nil", ErrConfig)
	}
	if cfg.Chunk == 0 {
		cfg.Chunk = min(4096, cfg.Size/2)
	}
	if cfg.Chunk < 1 || cfg.Chunk > cfg.Size {
		return nil, fmt.Errorf("%w: chunk %d outside [1, %d]", ErrConfig, cfg.Chunk, cfg.Size)
	}
	shift := uint(0)
	for 1<<shift < cfg.Size {
		shift++
	}
	b := &Buffer{
		fillLock: make(chan struct{}, 1),
		ids:      make([]uint64, cfg.Size),
		meta:     make([]meta, cfg.Size),
		released: make([]atomic.Uint64, cfg.Size/blockSize),
		mask:     uint64(cfg.Size - 1),
		size:     uint64(cfg.Size),
		lapShift: shift,
		// One tick of margin for a timer that fires late: an ID is kept
		// while tick − stamp < MaxStaleness/Tick, so its age stays under
		// MaxStaleness plus one tick even when the tick lags by up to one.
		staleTicks: int64(cfg.MaxStaleness/cfg.Tick) - 1,
		tickDur:    cfg.Tick,
		chunk:      cfg.Chunk,
		clock:      cfg.Clock,
		scratch:    make([]uint64, cfg.Chunk),
		wake:       make(chan struct{}, 1),
		closed:     make(chan struct{}),
		done:       make(chan struct{}),
	}
	b.fast, _ = cfg.Clock.(fastMono)
	b.tick.Store(b.nowTick())
	return b, nil
}

func (b *Buffer) nowTick() int64 { return int64(b.mono() / b.tickDur) }

// mono is the clock's monotonic reading, with one read where the clock
// has a monotonic-only one: every reading the ring makes (stamps, the
// filler's rounds and timer, takes).
func (b *Buffer) mono() time.Duration {
	if b.fast != nil {
		if m, ok := b.fast.FastMono(); ok {
			return m
		}
	}
	_, m := b.clock.Now()
	return m
}

// tickAt is the freshness tick at the monotonic reading now, which a take
// judges its IDs by: the shared tick while now lies within it, else now's
// own, which it publishes (advanceTick). So a take never judges by a tick
// older than its own reading: the filler's timer, which advances the tick
// between takes, may fire late on a starved machine (and its goroutine run
// later still), and a take that trusted it handed out IDs older than the
// bound by that lateness. The shared tick moves once per tick; the common
// case is one load and a compare.
func (b *Buffer) tickAt(now time.Duration) int64 {
	tick := b.tick.Load()
	if now < time.Duration(tick+1)*b.tickDur {
		return tick
	}
	return b.advanceTick(int64(now / b.tickDur))
}

// advanceTick raises the shared tick to t unless it is there already,
// and returns the tick then in force. The filler and the takers both
// advance it, each from its own reading; it never moves back.
func (b *Buffer) advanceTick(t int64) int64 {
	for {
		cur := b.tick.Load()
		if cur >= t || b.tick.CompareAndSwap(cur, t) {
			return max(cur, t)
		}
	}
}

// Cap returns the number of slots.
func (b *Buffer) Cap() int { return int(b.size) }

// Len returns the number of IDs buffered (stale ones until dropped).
func (b *Buffer) Len() int {
	h := b.head.Load()
	t := b.tail.Load()
	if t < h {
		return 0
	}
	return int(t - h)
}

// Take hands out one ID, or ErrEmpty at once.
func (b *Buffer) Take() (uint64, error) {
	var tick int64
	read := false // the clock, once the ring is found holding IDs
	for {
		h := b.head.Load()
		t := b.tail.Load()
		if h >= t {
			b.emptyHits.Add(1)
			b.poke()
			return 0, ErrEmpty
		}
		if !read {
			tick, read = b.tickAt(b.mono()), true
		}
		if !b.head.CompareAndSwap(h, h+1) {
			continue
		}
		if hook := b.testHookClaimed; hook != nil {
			hook()
		}
		i := h & b.mask
		m, id := b.meta[i], b.ids[i]
		retired := m.lapEpoch != lapEpoch(h, b.lapShift, b.epoch.Load())
		if retired && m.lapEpoch>>16 != uint32(uint16(h>>b.lapShift)) {
			panic(fmt.Sprintf("ringbuffer: slot for position %d holds lap %d", h, m.lapEpoch>>16))
		}
		ok := !retired && fresh(m.stamp, tick, b.staleTicks)
		b.released[i/blockSize].Add(1)
		if (int64(t-h)-1)*2 < b.target.Load() {
			b.poke()
		}
		if ok {
			return id, nil
		}
		if retired {
			b.droppedReset.Add(1)
		} else {
			b.droppedStale.Add(1)
		}
	}
}

// TakeN hands out up to len(dst) IDs, reserving them in one step, and
// returns how many it wrote, or ErrEmpty at once when it has none. The IDs
// written are increasing.
func (b *Buffer) TakeN(dst []uint64) (int, error) {
	n, err := b.takeN(dst)
	if err != nil {
		b.emptyHits.Add(1)
		b.poke()
	}
	return n, err
}

func (b *Buffer) takeN(dst []uint64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	tick := b.tickAt(b.mono())
	got := 0
	for got == 0 {
		var h, n, t uint64
		for {
			h = b.head.Load()
			t = b.tail.Load()
			if h >= t {
				return 0, ErrEmpty
			}
			n = min(uint64(len(dst)), t-h)
			if b.head.CompareAndSwap(h, h+n) {
				break
			}
		}
		if hook := b.testHookClaimed; hook != nil {
			hook()
		}
		got = b.copyOut(h, n, dst, tick)
		if left := int64(t - h - n); left*2 < b.target.Load() {
			b.poke()
		}
	}
	return got, nil
}

// copyOut copies the claimed positions [h, h+n) into dst, skipping IDs
// stale at the take's tick (tickAt) and retired ones, then releases the
// slots to the filler.
func (b *Buffer) copyOut(h, n uint64, dst []uint64, takeTick int64) int {
	epoch := b.epoch.Load()
	tick := uint32(takeTick)
	staleTicks := int32(b.staleTicks)
	got := 0
	var stale, retired uint64
	// Segment by segment: the ring wraps, and the lap changes, at most
	// once within a take.
	for pos := h; pos < h+n; {
		i := pos & b.mask
		seg := min(h+n-pos, b.size-i)
		want := lapEpoch(pos, b.lapShift, epoch)
		ms := b.meta[i : i+seg]
		clean := true
		for _, m := range ms {
			if m.lapEpoch != want || int32(tick-m.stamp) > staleTicks {
				clean = false
				break
			}
		}
		if clean {
			got += copy(dst[got:], b.ids[i:i+seg])
		} else {
			for j, m := range ms {
				switch {
				case m.lapEpoch>>16 != want>>16:
					// Cannot happen: the filler writes a slot only after
					// its previous taker released it, and publishes it
					// before any taker can claim it.
					panic(fmt.Sprintf("ringbuffer: slot for position %d holds lap %d", pos+uint64(j), m.lapEpoch>>16))
				case m.lapEpoch != want:
					retired++
				case int32(tick-m.stamp) > staleTicks:
					stale++
				default:
					dst[got] = b.ids[i+uint64(j)]
					got++
				}
			}
		}
		pos += seg
	}
	b.release(h, n)
	if stale > 0 {
		b.droppedStale.Add(stale)
	}
	if retired > 0 {
		b.droppedReset.Add(retired)
	}
	return got
}

// release returns positions [h, h+n) to the filler, one atomic add per
// block touched.
func (b *Buffer) release(h, n uint64) {
	for n > 0 {
		inBlock := min(n, blockSize-h%blockSize)
		b.released[(h&b.mask)/blockSize].Add(inBlock)
		h += inBlock
		n -= inBlock
	}
}

func (b *Buffer) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Generate fills dst directly from the source under the filler's lock,
// bypassing the ring: the server uses it for what the ring could not give,
// so a caller never sees ErrEmpty. It returns how many IDs it wrote (fewer
// than len(dst) only with an error: the source's, or ctx's when the lock
// could not be had before ctx ended).
//
// Under the lock it first drains what the ring holds, so every ID it
// returns is newer than any the same caller took before, and older than
// any the filler publishes after. The source waits with ctx: a source
// that may wait long must end its waits by itself when it is retired (the
// generator's Retire and Hold do).
func (b *Buffer) Generate(ctx context.Context, dst []uint64) (int, error) {
	n, _, err := b.generate(ctx, dst, false)
	return n, err
}

// GenerateBulk is Generate for a large request, which must not hold the
// filler's lock while it waits for the clock: under the lock it drains the
// ring as Generate does, then takes what the source's TryBulk gives
// without waiting. When that falls short of dst it returns, with no error,
// how many it wrote and await, which waits (without the lock) until the
// source can produce again; the caller waits on it and calls GenerateBulk
// again. A source that is not a BulkSource is Generate's.
func (b *Buffer) GenerateBulk(ctx context.Context, dst []uint64) (n int, await func(context.Context) error, err error) {
	return b.generate(ctx, dst, true)
}

// DrainThen takes into dst what the ring holds (up to len(dst)) and then
// runs produce with that count, both under the filler's lock: what produce draws from the
// source itself is newer than every ID the ring handed out before, and
// older than any it publishes after, as with Generate. It is for callers
// that take the source's output in another shape (runs of IDs); produce
// must not wait. It returns how many IDs it took from the ring.
func (b *Buffer) DrainThen(ctx context.Context, dst []uint64, produce func(took int) error) (int, error) {
	select {
	case b.fillLock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-b.fillLock; b.poke() }()
	if b.src == nil {
		return 0, ErrNoSource
	}
	got := 0
	for got < len(dst) {
		n, err := b.takeN(dst[got:])
		if err != nil {
			break
		}
		got += n
	}
	return got, produce(got)
}

// generate is Generate, and GenerateBulk when bulk is set.
func (b *Buffer) generate(ctx context.Context, dst []uint64, bulk bool) (got int, await func(context.Context) error, err error) {
	select {
	case b.fillLock <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
	src := b.src
	if src == nil {
		err = ErrNoSource
	}
	// When the IDs the drain takes were made: no later than the chunk at
	// the head now (the filler publishes in order, and not while the lock
	// is held; other takers only move the head on).
	var made uint32
	if h := b.head.Load(); h < b.tail.Load() {
		made = b.meta[h&b.mask].stamp
	}
	for err == nil && got < len(dst) {
		n, terr := b.takeN(dst[got:])
		if terr != nil {
			break
		}
		got += n
	}
	fromRing := got
	bs, isBulk := src.(BulkSource)
	bulk = bulk && isBulk
	produce := func() {
		for err == nil && got < len(dst) {
			var n int
			if bulk {
				if n, err = bs.TryBulk(dst[got:]); n == 0 && err == nil {
					await = bs.AwaitBulk
					break
				}
			} else {
				n, err = src.NextBatch(ctx, dst[got:])
			}
			got += n
		}
	}
	produce()
	if fromRing > 0 && fromRing < len(dst) && err == nil && !fresh(made, b.tickAt(b.mono()), b.staleTicks) {
		// The source waited (for the clock, a reservation) while the IDs
		// taken from the ring aged past the bound: they are dropped, as a
		// take would drop them, and the source gives the rest. Every ID
		// it gives is above them, and above everything the ring held: the
		// drain emptied it (it fell short of dst), and nothing is
		// published while the lock is held. (Had the ring filled dst, it
		// may hold more, below what the source would give now: the source
		// was not asked, and nothing waited.)
		got = copy(dst, dst[fromRing:got])
		b.droppedStale.Add(uint64(fromRing))
		fromRing, await = 0, nil
		produce()
	}
	<-b.fillLock
	b.direct.Add(uint64(got - fromRing))
	b.poke()
	return got, await, err
}

// Reset retires the current source and installs src (nil: none). The epoch
// advances instead of the ring rewinding: every ID buffered from the old
// source is dropped (also by a taker that claimed it before the Reset and
// copies it after), and no refill from the old source is published. The
// filler never waits while it holds the lock (TrySource), so Reset waits
// at most for one chunk being produced, or for a Generate whose source
// waits (the generator's Retire ends such a wait).
func (b *Buffer) Reset(src Source) {
	b.fillLock <- struct{}{}
	b.epoch.Add(1)
	b.src = src
	<-b.fillLock
	b.drain()
	b.poke()
}

// Invalidate drops everything buffered, as Reset does, but keeps the
// source and does not wait for the filler's lock (a Generate may hold it
// while its source waits): for a source whose output changed under it —
// a wide generator that lost a worker — so that nothing the ring held
// from before the change is handed out. A chunk the filler is producing
// meanwhile is stamped with the old epoch and dropped too.
func (b *Buffer) Invalidate() {
	b.epoch.Add(1)
	b.drain()
	b.poke()
}

// drain claims and releases everything buffered, counting it as retired.
func (b *Buffer) drain() {
	for {
		h := b.head.Load()
		t := b.tail.Load()
		if h >= t {
			return
		}
		if b.head.CompareAndSwap(h, t) {
			b.release(h, t-h)
			b.droppedReset.Add(t - h)
			return
		}
	}
}

// Stats returns the counters.
func (b *Buffer) Stats() Stats {
	h := b.head.Load()
	ds, dr := b.droppedStale.Load(), b.droppedReset.Load()
	return Stats{
		Capacity:     int(b.size),
		Available:    b.Len(),
		Target:       int(b.target.Load()),
		Taken:        h - min(h, ds+dr),
		Direct:       b.direct.Load(),
		DroppedStale: ds,
		DroppedReset: dr,
		EmptyHits:    b.emptyHits.Load(),
		Refills:      b.refills.Load(),
		RefillErrors: b.refillErrors.Load(),
	}
}

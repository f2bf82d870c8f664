package ringbuffer

import (
	"context"
	"math"
	"time"
)

// sampler estimates recent demand (IDs per second) from the consumed
// counter, as an exponentially weighted rate with time constant tau.
type sampler struct {
	have     bool
	at       time.Duration // monotonic reading of the last sample
	consumed uint64
	rate     float64
}

const demandTau = 200 * time.Millisecond

func (s *sampler) update(mono time.Duration, consumed uint64) float64 {
	if !s.have {
		s.have, s.at, s.consumed = true, mono, consumed
		return s.rate
	}
	dt := mono - s.at
	if dt <= 0 {
		return s.rate
	}
	inst := float64(consumed-s.consumed) / dt.Seconds()
	decay := math.Exp(-float64(dt) / float64(demandTau))
	s.rate = s.rate*decay + inst*(1-decay)
	if inst > s.rate {
		// Follow a rise at once; decay slowly.
		s.rate = inst
	}
	if s.rate < 1 {
		s.rate = 0
	}
	s.at, s.consumed = mono, consumed
	return s.rate
}

// Start runs the filler goroutine. Call Close to stop it.
func (b *Buffer) Start() {
	if b.started.Swap(true) {
		return
	}
	go b.run()
}

// Close stops the filler and retires the source. Takes after Close return
// what is still buffered, then ErrEmpty; Generate returns ErrNoSource.
func (b *Buffer) Close() {
	if b.isClose.Swap(true) {
		return
	}
	close(b.closed)
	b.Reset(nil)
	if b.started.Load() {
		<-b.done
	}
}

func (b *Buffer) run() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var timerC <-chan time.Time
	for {
		select {
		case <-b.closed:
			timer.Stop()
			return
		case <-b.wake:
		case <-timerC:
			timerC = nil
		}
		if b.round() {
			if timerC == nil {
				// The next round at the next tick's start, not a tick from
				// now: the tick takers compare with then lags the clock only
				// by how late the timer fires, not by up to a tick more
				// (the freshness bound, doc.go).
				timer.Reset(b.tickDur - b.mono()%b.tickDur)
				timerC = timer.C
			}
		} else if timerC != nil {
			timer.Stop()
			timerC = nil
		}
	}
}

// round advances the freshness tick, drops stale IDs, resizes the target
// to demand and refills under half of it. It reports whether the timer must
// keep running: while the ring holds IDs (their age must be tracked) or
// demand is not zero.
func (b *Buffer) round() bool {
	mono := b.mono()
	// tick, epoch and target share a line every take reads: a store only
	// when the value moves (advanceTick) spares the takers a miss per
	// round.
	tick := b.advanceTick(int64(mono / b.tickDur))
	b.purgeStale(tick)

	st := b.Stats()
	// Empty hits count as demand too: each wanted at least one ID.
	rate := b.lastSample.update(mono, st.Taken+st.Direct+st.EmptyHits)
	target := int64(rate * b.maxStaleness().Seconds() / 2)
	if rate > 0 {
		target = max(target, 2*blockSize)
	}
	target = min(target, int64(b.size))
	if b.target.Load() != target {
		b.target.Store(target)
	}
	if avail := int64(b.Len()); avail*2 < target {
		b.fill(int(target - avail))
	}
	return b.Len() > 0 || rate > 0
}

func (b *Buffer) maxStaleness() time.Duration { return time.Duration(b.staleTicks+1) * b.tickDur }

// purgeStale drops stale IDs at the head of the ring. Only the filler
// writes slots, and this runs on the filler, so reading unclaimed slots is
// safe.
func (b *Buffer) purgeStale(tick int64) {
	for {
		h, t := b.head.Load(), b.tail.Load()
		k := uint64(0)
		for h+k < t && !fresh(b.meta[(h+k)&b.mask].stamp, tick, b.staleTicks) {
			k++
		}
		if k == 0 {
			return
		}
		if b.head.CompareAndSwap(h, h+k) {
			b.release(h, k)
			b.droppedStale.Add(k)
			return
		}
	}
}

// writable returns how many positions from t (up to want) the filler may
// write: a slot is written only after every slot of its block from the
// previous lap was released by its taker.
func (b *Buffer) writable(t uint64, want int) int {
	n := 0
	for n < want {
		p := t + uint64(n)
		lap := p >> b.lapShift
		blk := (p & b.mask) / blockSize
		if b.released[blk].Load() < lap*blockSize {
			break
		}
		n += int(min(uint64(want-n), blockSize-p%blockSize))
	}
	return n
}

// produce asks the source for what it can give at once. The filler never
// waits while it holds the lock that Generate, Reset and Close take: a
// Source that may wait (for the clock, a reservation) implements TrySource,
// and the filler declines what would need a wait; callers wait for it in
// Generate, each within its own deadline. A Source without TryBatch is
// asked with NextBatch and must not wait long.
func (b *Buffer) produce(src Source, dst []uint64) (int, error) {
	if t, ok := src.(TrySource); ok {
		return t.TryBatch(dst)
	}
	return src.NextBatch(context.Background(), dst)
}

// fill adds up to k IDs from the source, chunk by chunk.
func (b *Buffer) fill(k int) {
	select {
	case b.fillLock <- struct{}{}:
	case <-b.closed:
		return
	}
	defer func() { <-b.fillLock }()
	src := b.src
	if src == nil {
		return
	}
	epoch := b.epoch.Load()
	written := 0
	for written < k {
		t := b.tail.Load()
		room := b.writable(t, min(b.chunk, k-written))
		if room == 0 {
			break
		}
		// Stamp before generating: an ID is never younger than its stamp.
		stamp := b.nowTick()
		n, err := b.produce(src, b.scratch[:room])
		if err != nil {
			b.refillErrors.Add(1)
			break
		}
		if n == 0 {
			break // the source would have to wait: callers wait in Generate
		}
		for i := 0; i < n; i++ {
			p := t + uint64(i)
			k := p & b.mask
			b.ids[k] = b.scratch[i]
			b.meta[k] = meta{stamp: uint32(stamp), lapEpoch: lapEpoch(p, b.lapShift, epoch)}
		}
		b.tail.Store(t + uint64(n))
		written += n
	}
	if written > 0 {
		b.refills.Add(1)
	}
}

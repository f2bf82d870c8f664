package client

import (
	"context"
	"math"
	"time"
)

const (
	// maxInFlight bounds concurrent refill fetches: one. Two in flight to
	// one node come back interleaved (the node cuts both from one stream
	// of runs), and the order rule (behindLocked) then drops the runs of
	// the later that fall below what was already handed out: at a
	// snowflake node's full rate a third of the IDs fetched were dropped,
	// and the client got 2.7 M IDs/s of the node's 4.1 M; one at a time it
	// gets 4.1 M and drops none (test/bench/clients.sh). The buffer still
	// keeps two batches buffered or on their way.
	maxInFlight = 1
	// rateKeep is how much of the old rate an update keeps when demand
	// falls (demand that rises is taken at once).
	rateKeep = 0.7
	// Failed rounds back off from minBackoff, doubling to maxBackoff.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

type fetchResult struct {
	fetched
	born  uint64 // refiller.delivered when it was launched
	count int64  // the count asked for
	err   error
}

// refiller is the state the refill goroutine alone owns.
type refiller struct {
	results     chan fetchResult
	inFlight    int
	inFlightIDs int64
	delivered   uint64  // refills delivered
	rate        float64 // IDs per second
	batch       int64
	lastMono    time.Duration
	lastTotal   int64
	lastStarved int64
	// lastOverloads is the overloads count the batch size last answered.
	lastOverloads uint64
	backoff       time.Duration
	retryAt       time.Duration // mono; no fetch before it after a failed round
	ticker        *time.Ticker
	ticking       bool
	// wake ends the backoff: after a failed round the next one starts
	// when retryAt comes, not at the tick after it (max age / 8 may be
	// far longer than the backoff).
	wake *time.Timer
}

// refill is the refill goroutine: it advances the tick, measures the
// demand, sizes batches, drops stale ones and launches fetches. It wakes
// on a kick (a caller reached half of a batch or found the buffer empty),
// on a fetch result, and on its timer, which runs only while there is
// something to age or measure: an idle client with an empty buffer has no
// timer.
func (c *Client) refill() {
	defer c.wg.Done()
	r := &refiller{
		results: c.results,
		batch:   int64(c.opts.minBatch),
		ticker:  time.NewTicker(c.tickLen),
		ticking: true,
	}
	defer r.ticker.Stop()
	r.wake = time.NewTimer(time.Hour)
	r.wake.Stop()
	defer r.wake.Stop()
	r.lastMono = time.Duration(c.now())
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kickC:
		case <-r.ticker.C:
			c.stats.ticks.Add(1)
		case <-r.wake.C:
		case res := <-r.results:
			r.inFlight--
			r.inFlightIDs -= res.count
			c.deliver(r, res)
			if res.err != nil {
				if d := r.retryAt - time.Duration(c.now()); d > 0 {
					r.wake.Reset(d)
				}
			}
		}
		mono := time.Duration(c.now())
		buffered, waiters := c.measure(r, mono)
		c.launch(r, mono, buffered, waiters)

		need := buffered > 0 || r.inFlight > 0 || waiters > 0 || r.rate*c.tickLen.Seconds() >= 1
		switch {
		case need && !r.ticking:
			r.ticker.Reset(c.tickLen)
			r.ticking = true
		case !need && r.ticking:
			r.ticker.Stop()
			r.ticking = false
		}
	}
}

// measure drops stale batches, updates the rate and the batch size, and
// returns the fresh IDs buffered and the callers waiting.
func (c *Client) measure(r *refiller, mono time.Duration) (buffered int64, waiters int) {
	c.mu.Lock()
	t := int64(mono)
	if b := c.cur.Load(); b.expire < t && b != c.empty {
		c.installLocked()
	}
	kept := c.queue[:0]
	for _, b := range c.queue {
		if b.expire < t {
			c.stats.dropped.Add(uint64(b.n))
			continue
		}
		kept = append(kept, b)
	}
	for i := len(kept); i < len(c.queue); i++ {
		c.queue[i] = nil
	}
	c.queue = kept
	total := c.retired
	if b := c.cur.Load(); !b.retired {
		total += b.served()
	}
	starved := c.starved
	buffered = c.bufferedLocked()
	waiters = c.waiters
	c.mu.Unlock()

	dt := mono - r.lastMono
	if dt < c.tickLen/2 {
		return buffered, waiters
	}
	inst := float64(total-r.lastTotal) / dt.Seconds()
	if inst >= r.rate {
		r.rate = inst
	} else {
		r.rate = rateKeep*r.rate + (1-rateKeep)*inst
	}
	if r.rate < 1e-3 {
		r.rate = 0
	}
	r.lastMono, r.lastTotal = mono, total
	defer c.stats.measures.Add(1)

	size := r.rate * c.opts.batchWindow.Seconds()
	if starved != r.lastStarved {
		// Callers waited: grow at least twice over, as far as the IDs
		// would still be used before they go stale.
		size = max(size, min(2*float64(r.batch), r.rate*c.opts.maxAge.Seconds()))
	}
	r.lastStarved = starved
	c.directAbove.Store(int64(min(max(size, float64(c.opts.minBatch)), float64(c.opts.maxBatch))))
	if ov := c.overloads.Load(); ov != r.lastOverloads {
		// A node shed a request: ask for half as much.
		r.lastOverloads = ov
		size = min(size, float64(r.batch)/2)
	}
	r.batch = int64(min(max(size, float64(c.opts.minBatch)), float64(c.opts.maxBatch)))
	c.stats.batchSize.Store(r.batch)
	c.stats.rate.Store(math.Float64bits(r.rate))
	return buffered, waiters
}

// launch starts fetches: one when callers wait on an empty buffer, and,
// while the demand would use a batch before it goes stale, enough to keep
// two batches buffered or on their way.
func (c *Client) launch(r *refiller, mono time.Duration, buffered int64, waiters int) {
	if mono < r.retryAt {
		return
	}
	proactive := r.rate*c.opts.maxAge.Seconds() >= float64(r.batch)
	for r.inFlight < maxInFlight {
		have := buffered + r.inFlightIDs
		if !(waiters > 0 && have == 0) && !(proactive && have < 2*r.batch) {
			return
		}
		r.inFlight++
		r.inFlightIDs += r.batch
		c.mu.Lock()
		c.fetching = r.inFlight
		c.mu.Unlock()
		count, born := r.batch, r.delivered
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			f, err := c.fetch(c.ctx, int(count), true)
			r.results <- fetchResult{fetched: f, born: born, count: count, err: err}
		}()
	}
}

// deliver publishes a fetch result: each of its runs a batch in the
// queue, or a failed round to the waiting callers.
func (c *Client) deliver(r *refiller, res fetchResult) {
	mono := time.Duration(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetching = r.inFlight
	if c.closed {
		if res.err == nil { // arrived after Close dropped the buffer
			c.stats.dropped.Add(countOf(res.runs))
		}
		return
	}
	if res.err != nil {
		if c.ctx.Err() != nil {
			return
		}
		r.backoff = min(max(2*r.backoff, minBackoff), maxBackoff)
		r.retryAt = mono + r.backoff
		if _, until, ok := c.heldUntil(mono); ok {
			// Every endpoint asked the client to wait (RetryInfo): no
			// refill before the first is free again.
			r.retryAt = max(r.retryAt, until)
		}
		c.failGen++
		c.lastErr = res.err
		c.nextRound = r.retryAt
	} else {
		r.backoff = 0
		c.nextRound = 0
		r.delivered++
		// The taker of the answer's middle ID wakes the refiller, as
		// with one batch per answer, however many runs it came in.
		mid, off := int64(countOf(res.runs))/2, int64(0)
		for _, run := range res.runs {
			n := int64(run.Count)
			b := &batch{first: run.First, n: n, half: -1, expire: int64(res.start + c.opts.maxAge),
				ep: res.ep, born: res.born, dseq: r.delivered}
			if off <= mid && mid < off+n {
				b.half = mid - off
			}
			off += n
			c.enqueueLocked(b)
		}
		c.installLocked()
	}
	if c.waiters > 0 {
		close(c.notify)
		c.notify = make(chan struct{})
	}
}

// fetchDirect fetches n IDs for NextN and NextRange straight from the
// endpoints, in as many fetches as the endpoints' bounds take. When a
// later fetch fails, the IDs the earlier ones brought are never handed
// out: counted dropped here, since the caller never sees them.
func (c *Client) fetchDirect(ctx context.Context, n int64) ([]Run, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	var out []Run
	for got := int64(0); got < n; {
		f, err := c.fetch(ctx, int(n-got), false)
		if err != nil {
			c.stats.dropped.Add(uint64(got))
			return nil, err
		}
		out = append(out, f.runs...)
		got += int64(countOf(f.runs))
	}
	return out, nil
}

func (c *Client) rate() float64 { return math.Float64frombits(c.stats.rate.Load()) }

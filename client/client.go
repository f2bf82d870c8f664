package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// maxCallRecvMsgSize admits the largest NextIDs response a node sends
// (1 M fixed64 IDs, with room to spare); a NextRange response is far
// smaller for the same count.
const maxCallRecvMsgSize = 16 << 20

// Client hands out IDs from a local prefetch buffer that one refill
// goroutine keeps filled from the endpoints. It is safe for concurrent use.
type Client struct {
	// The take path reads cur, on a cache line of its own, and the clock.
	cur atomic.Pointer[batch]
	_   [cacheLine - 8]byte

	kickC chan struct{} // wakes the refiller; buffered 1
	// results carries the refill fetches' outcomes to the refiller
	// (buffered maxInFlight); Close drains what the refiller left.
	results chan fetchResult

	// overloads counts the requests nodes shed (OVERLOADED); the refiller
	// halves its batch size after each.
	overloads atomic.Uint64
	// directAbove is the count above which NextN and NextRange fetch
	// directly instead of from the buffer: the batch size the demand
	// asks for, before shedding halves it (a node that sheds must not
	// turn buffered takes into direct fetches).
	directAbove atomic.Int64

	opts    options
	clock   Clock
	sys     *systemClock // the clock when it is the machine's (read without an interface call)
	tickLen time.Duration
	log     *slog.Logger
	empty   *batch

	// The endpoints: the fixed targets, and the addresses the DNS names
	// resolved to last (copy on write under epMu; resolve.go). active is
	// the endpoint last served from.
	targets  []target
	dial     []grpc.DialOption
	epMu     sync.Mutex
	eps      atomic.Pointer[[]*endpoint]
	active   atomic.Pointer[endpoint]
	resolveC chan struct{} // asks the resolver to run; nil without DNS names
	resolved chan struct{} // closed once the DNS names were first resolved (at once without any)

	mu      sync.Mutex
	queue   []*batch      // fetched batches waiting behind cur
	last    *batch        // the last batch installed as cur
	notify  chan struct{} // closed when a batch arrives or a round fails
	failGen uint64        // counts failed rounds
	lastErr error         // the last failed round's error
	// nextRound is the refiller's backoff after a failed round, mirrored
	// (mono; 0 after a round that delivered): no fetch starts before it.
	// fetching is the number of fetches in flight.
	nextRound time.Duration
	fetching  int
	retired   int64 // IDs served from retired batches
	waiters   int   // callers waiting in the slow path
	starved   int64 // times a caller found the buffer empty
	closed    bool
	// attempts are the refill's attempts in flight, which waiting
	// callers may cut short; waitDeadlines the deadlines of the waiting
	// callers that have one (kept only with more than one endpoint).
	attempts      map[*attempt]struct{}
	waitDeadlines []time.Time

	stats struct {
		fetches     atomic.Uint64
		fetchedIDs  atomic.Uint64
		fetchErrors atomic.Uint64
		callErrors  atomic.Uint64 // failed attempts of Info and Decode
		failovers   atomic.Uint64
		dropped     atomic.Uint64
		ticks       atomic.Uint64
		measures    atomic.Uint64 // rate updates
		batchSize   atomic.Int64
		rate        atomic.Uint64 // float64 bits
	}

	// seq routes the sequence calls (seq.go).
	seq seqRouter

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// calls is read-held by the calls in flight (NextN, NextRange, Info,
	// Decode: enter, leave); Close takes it to wait for them, after
	// cancelling ctx, which ends their attempts.
	calls     sync.RWMutex
	closeOnce sync.Once
	closeErr  error
}

// Stats is a snapshot of a client's counters.
type Stats struct {
	// Buffered is how many fresh IDs the buffer holds.
	Buffered int64
	// BatchSize is the count the next refill asks for.
	BatchSize int
	// Rate is the measured demand in IDs per second.
	Rate float64
	// Fetches and FetchedIDs count successful NextRange (or NextIDs)
	// calls and their IDs (refills and the direct fetches of NextN and
	// NextRange); FetchErrors counts failed attempts, Failovers the times
	// a fetch moved to another endpoint.
	Fetches, FetchedIDs, FetchErrors, Failovers uint64
	// CallErrors counts the failed attempts of Info and Decode calls.
	CallErrors uint64
	// Dropped counts IDs dropped unserved: because they outlived MaxAge,
	// came back from a node behind IDs of its already handed out (see
	// the package's Order invariant), were buffered at Close, or were
	// taken for a NextN or NextRange that then failed.
	Dropped uint64
	// Ticks counts the refiller's timer ticks.
	Ticks uint64
	// Endpoint is the endpoint the client last got IDs from.
	Endpoint string
	// SeqCalls counts the calls of NextSeq, NextSeqs and CurrentSeq that
	// passed the local checks of key and count;
	// SeqRedirects the WRONG_NODE refusals they got (each followed to
	// the owner it names: none while the section map is current);
	// SeqRetries the waits after a refusal or failure at a section's
	// owner (a section that moves, an owner that does not answer);
	// SeqMapRefreshes the reads of the section map.
	SeqCalls, SeqRedirects, SeqRetries, SeqMapRefreshes uint64
}

// New returns a client of the firn nodes at endpoints (gRPC targets such
// as "127.0.0.1:7300", or "dns:///name:port"). It does not wait for a
// connection, nor for DNS: names are resolved in the background at once,
// and a call that finds no endpoint yet waits for that resolution within
// its deadline. The first refill starts on the first Next. Errors: ErrInvalidOption (no endpoint, a
// duplicate or empty one, an option out of bounds, naming it), or the
// error of grpc.NewClient.
func New(endpoints []string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if len(endpoints) == 0 {
		return nil, optionErr("endpoints: need at least 1")
	}
	seen := map[string]bool{}
	var targets []target
	for i, e := range endpoints {
		if e == "" {
			return nil, optionErr("endpoints[%d] is empty", i)
		}
		if seen[e] {
			return nil, optionErr("endpoints[%d] %q given twice", i, e)
		}
		seen[e] = true
		t, err := parseTarget(e)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.clock == nil {
		o.clock = newSystemClock()
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	c := &Client{
		kickC:    make(chan struct{}, 1),
		results:  make(chan fetchResult, maxInFlight),
		opts:     o,
		clock:    o.clock,
		tickLen:  o.maxAge / 8,
		log:      o.logger.With("component", "firn-client"),
		notify:   make(chan struct{}),
		empty:    newEmptyBatch(),
		attempts: map[*attempt]struct{}{},
	}
	c.seq.kick = make(chan struct{}, 1)
	c.sys, _ = o.clock.(*systemClock)
	c.cur.Store(c.empty)
	c.stats.batchSize.Store(int64(o.minBatch))
	c.directAbove.Store(int64(o.minBatch))
	c.ctx, c.cancel = context.WithCancel(context.Background())

	creds := insecure.NewCredentials()
	if o.tlsConfig != nil {
		creds = credentials.NewTLS(o.tlsConfig)
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxCallRecvMsgSize)),
		// The node refuses pings more often than every 10 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 5 * time.Second}),
	}, o.dialOptions...)
	c.targets, c.dial = targets, dial
	c.eps.Store(&[]*endpoint{})
	names := false
	for i, t := range targets {
		if t.isName() {
			names = true
			continue
		}
		// A fixed target that gRPC refuses is the caller's error.
		conn, err := grpc.NewClient(t.raw, dial...)
		if err != nil {
			c.cancel()
			return nil, fmt.Errorf("client: endpoints[%d] %q: %w", i, t.raw, err)
		}
		conn.Close()
	}
	// The fixed targets now; DNS names in the resolver, at once: New does
	// not wait for DNS. A round that finds no endpoint while the first
	// resolution runs waits for it (awaitResolved).
	c.resolved = make(chan struct{})
	c.resolve(c.ctx, false)
	if names {
		c.resolveC = make(chan struct{}, 1)
		c.wg.Add(1)
		go c.resolver()
	} else {
		close(c.resolved)
	}
	c.wg.Add(1)
	go c.refill()
	return c, nil
}

// Next returns one ID. While the buffer holds fresh IDs it takes no lock
// and does not allocate (ctx is not even looked at): it reads the
// monotonic clock once, to hand out no ID older than MaxAge; when
// the buffer is empty it waits for a refill, until ctx is done or a whole
// failover round failed (ErrUnavailable, wrapping the last endpoint's
// error). While it waits, ctx's deadline bounds the refill's attempts and
// its end cuts them (see WithCallTimeout), so an endpoint that hangs is
// left within the caller's deadline. IDs from one client are distinct;
// the IDs one caller gets from Next increase while one endpoint serves,
// but not across a failover.
func (c *Client) Next(ctx context.Context) (uint64, error) {
	b := c.cur.Load()
	if c.now() <= b.expire {
		i := b.pos.Add(1) - 1
		if i < b.n {
			if i == b.half {
				c.kick()
			}
			return b.first + uint64(i), nil
		}
	}
	return c.nextSlow(ctx)
}

func (c *Client) nextSlow(ctx context.Context) (uint64, error) {
	for {
		if err := c.waitBatch(ctx); err != nil {
			return 0, err
		}
		b := c.cur.Load()
		if c.now() <= b.expire {
			i := b.pos.Add(1) - 1
			if i < b.n {
				if i == b.half {
					c.kick()
				}
				return b.first + uint64(i), nil
			}
		}
	}
}

// Run is Count consecutive IDs: First, First+1, …, First+Count-1.
type Run struct {
	First, Count uint64
}

// NextN returns n distinct IDs (1 ≤ n ≤ MaxNextN), increasing: from the
// buffer while it holds them, the rest fetched directly (with failover,
// each attempt within its share of ctx's deadline; see WithCallTimeout)
// when they are more than a batch, sorted when they came from two nodes.
// Across calls they increase while one node serves them; after a
// failover the next call's IDs may lie below the last call's. Errors as
// for Next, and ErrInvalidCount for n out of bounds.
func (c *Client) NextN(ctx context.Context, n int) ([]uint64, error) {
	if n < 1 || n > MaxNextN {
		return nil, fmt.Errorf("%w: n %d outside [1, %d]", ErrInvalidCount, n, MaxNextN)
	}
	runs, err := c.collect(ctx, uint64(n))
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, n)
	for _, r := range runs {
		out = appendIDs(out, r)
	}
	return out, nil
}

// NextRange returns n distinct IDs (1 ≤ n ≤ MaxNextRange) as runs of
// consecutive IDs, increasing: sorted by First, every ID of a run below
// every ID of the next (runs that touch are merged), their Counts adding
// up to n. It takes them as NextN does: from the buffer while it holds
// them, the rest fetched directly when they are more than a batch, with
// NextRange (NextIDs from a node that does not know it), so a large n
// costs a few runs on the wire instead of 8 bytes an ID. Errors as for
// NextN.
func (c *Client) NextRange(ctx context.Context, n uint64) ([]Run, error) {
	if n < 1 || n > MaxNextRange {
		return nil, fmt.Errorf("%w: n %d outside [1, %d]", ErrInvalidCount, n, MaxNextRange)
	}
	return c.collect(ctx, n)
}

// taken is a run a call took from the buffer, with the monotonic reading
// at which its batch expires; a run fetched directly for the call has
// none (expire 0).
type taken struct {
	Run
	expire int64
}

// collect takes n IDs for NextN and NextRange, as sorted runs (takes from
// the buffer and direct fetches interleave, and may come from two nodes).
// A run taken from the buffer was fresh when taken; should the call then
// wait — for a refill, or for a direct fetch of the rest — a run whose
// batch expired meanwhile is dropped and taken again, so the buffer's
// freshness bound holds when the call returns. Runs fetched directly are
// handed out when the call returns, however long its fetches took. What a
// failed call took is never handed out: counted dropped.
func (c *Client) collect(ctx context.Context, n uint64) (_ []Run, err error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.leave()
	var out []taken
	got := uint64(0)
	defer func() {
		if err != nil { // what was taken is never handed out
			c.stats.dropped.Add(got)
		}
	}()
	for {
		waited := false
		for got < n {
			need := int64(n - got)
			if r, expire, ok := c.take(need); ok {
				out = append(out, taken{r, expire})
				got += r.Count
				continue
			}
			waited = true
			if need > c.directAbove.Load() {
				runs, err := c.fetchDirect(ctx, need)
				if err != nil {
					return nil, err
				}
				for _, r := range runs {
					out = append(out, taken{Run: r})
				}
				got += countOf(runs)
				continue
			}
			if err := c.waitBatch(ctx); err != nil {
				return nil, err
			}
		}
		if !waited {
			break
		}
		now, kept := c.now(), out[:0]
		for _, t := range out {
			if t.expire != 0 && now > t.expire {
				c.stats.dropped.Add(t.Count) // stale while the call waited
				got -= t.Count
				continue
			}
			kept = append(kept, t)
		}
		out = kept
		if got == n {
			break
		}
	}
	if c.closing() {
		return nil, ErrClosed
	}
	runs := make([]Run, len(out))
	for i, t := range out {
		runs[i] = t.Run
	}
	return sortRuns(runs), nil
}

// enter registers a call, or reports false once Close has begun. It
// takes no lock the refiller uses: NextN served from the buffer stays
// off the client's mutex.
func (c *Client) enter() bool {
	c.calls.RLock()
	if c.closing() {
		c.calls.RUnlock()
		return false
	}
	return true
}

// leave ends a call entered.
func (c *Client) leave() { c.calls.RUnlock() }

// closing reports whether Close has begun: a call still in flight then
// returns ErrClosed, whatever it got.
func (c *Client) closing() bool { return c.ctx.Err() != nil }

// take claims up to need IDs of cur without a lock: the run it got and
// the monotonic reading at which its batch expires, or false when cur
// holds no fresh ID.
func (c *Client) take(need int64) (Run, int64, bool) {
	b := c.cur.Load()
	if c.now() > b.expire {
		return Run{}, 0, false
	}
	end := b.pos.Add(need)
	start := end - need
	if start >= b.n {
		return Run{}, 0, false
	}
	hi := min(end, b.n)
	if start <= b.half && b.half < hi {
		c.kick()
	}
	return Run{First: b.first + uint64(start), Count: uint64(hi - start)}, b.expire, true
}

// appendIDs appends the IDs of r to ids.
func appendIDs(ids []uint64, r Run) []uint64 {
	for i := range r.Count {
		ids = append(ids, r.First+i)
	}
	return ids
}

// waitBatch returns nil once cur may hold fresh IDs, after waiting for a
// refill if need be. It returns ctx's error, ErrClosed, or the error of a
// failover round that failed while it waited.
func (c *Client) waitBatch(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.installLocked() {
		c.mu.Unlock()
		return nil
	}
	// Every endpoint asked the client to wait (RetryInfo) for longer than
	// this caller would: no refill comes in its time, and it is refused
	// at once with the refusal that said so (the endpoint's free first,
	// with the time still left), not left to its deadline — whichever
	// call met that refusal.
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		mono := time.Duration(c.now())
		if ep, until, ok := c.heldUntil(mono); ok && until-mono > time.Until(deadline) {
			err := c.heldError(ep, len(c.endpointList()), mono)
			c.mu.Unlock()
			return err
		}
		// The refiller backs off after a failed round (no RetryInfo came:
		// 50 ms, doubling to 1 s). With no fetch in flight, a caller whose
		// deadline ends before the next round gets no refill in its time
		// either: refused at once with that round's refusal, the node's
		// reason in it, not left to a bare deadline.
		if left := c.nextRound - mono; c.lastErr != nil && c.fetching == 0 && left > time.Until(deadline) {
			err := fmt.Errorf("client: no refill before the caller's deadline (the next round in %v, after a failed one): %w",
				left.Round(time.Millisecond), c.lastErr)
			c.mu.Unlock()
			return err
		}
	}
	ch, gen := c.notify, c.failGen
	c.waiters++
	c.starved++
	// With another endpoint to fail over to, the waiting callers'
	// deadlines bound the refill's attempts: the share of the most
	// patient one (see waitShareLocked). A caller that gives up cuts
	// nothing: the refill goes on for the others, and the endpoint, which
	// was never sent that caller's deadline, does not count it.
	multi := len(c.endpointList()) > 1 || c.resolveC != nil
	if multi && hasDeadline {
		c.waitDeadlines = append(c.waitDeadlines, deadline)
	}
	if now := time.Now(); multi {
		if share, ok := c.waitShareLocked(now); ok {
			c.cutAttemptsLocked(share)
		}
	}
	c.mu.Unlock()
	c.kick()

	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters--
	if multi && hasDeadline {
		for i, d := range c.waitDeadlines {
			if d.Equal(deadline) {
				last := len(c.waitDeadlines) - 1
				c.waitDeadlines[i] = c.waitDeadlines[last]
				c.waitDeadlines = c.waitDeadlines[:last]
				break
			}
		}
	}
	switch {
	case c.closed:
		return ErrClosed
	case err != nil:
		return err
	case c.installLocked():
		return nil
	case c.failGen != gen:
		return c.lastErr
	}
	return nil
}

// installLocked makes cur a batch with fresh IDs if the buffer has one,
// retiring an exhausted or stale cur and dropping stale queued batches. It
// reports whether cur now holds fresh IDs. Call with mu held.
func (c *Client) installLocked() bool {
	t := c.now()
	b := c.cur.Load()
	if b.expire >= t && b.pos.Load() < b.n {
		return true
	}
	c.retireLocked(b)
	for len(c.queue) > 0 {
		nb := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		if nb.expire < t || c.behindLocked(nb) {
			c.stats.dropped.Add(uint64(nb.n))
			continue
		}
		c.cur.Store(nb)
		c.last = nb
		return true
	}
	if b != c.empty {
		c.cur.Store(c.empty)
	}
	return false
}

// behindLocked reports whether nb's IDs are below those of the last batch
// installed, from the same endpoint, whose refill was in flight with nb's:
// the node served two refills in one order and they came back in the
// other. Handing nb out would give a caller that took from the last batch
// a lower ID next, so it is dropped. A batch fetched after the last one
// arrived is never dropped (a node that came back issuing lower IDs must
// not starve the client). Call with mu held.
func (c *Client) behindLocked(nb *batch) bool {
	l := c.last
	return l != nil && nb.ep == l.ep && nb.born < l.dseq && nb.first < l.first
}

// enqueueLocked queues nb behind the other batches, but before the queued
// batches of its endpoint with higher IDs, so that each endpoint's IDs
// are handed out in increasing order when two refills in flight to it
// come back in the other order. Call with mu held.
func (c *Client) enqueueLocked(nb *batch) {
	i := len(c.queue)
	for j := len(c.queue) - 1; j >= 0; j-- {
		if q := c.queue[j]; q.ep == nb.ep {
			if q.first < nb.first {
				break
			}
			i = j
		}
	}
	c.queue = slices.Insert(c.queue, i, nb)
}

// retireLocked accounts for b's served IDs and makes sure no later take
// gets any of its IDs. Call with mu held.
func (c *Client) retireLocked(b *batch) {
	if b.retired {
		return
	}
	b.retired = true
	served := b.pos.Load()
	if served < b.n {
		// Stale with IDs left: push pos past n so every later add lands
		// beyond the batch; adds before this one keep their indexes.
		served = min(b.pos.Add(b.n)-b.n, b.n)
	}
	served = min(served, b.n)
	c.retired += served
	c.stats.dropped.Add(uint64(b.n - served))
}

// bufferedLocked counts the fresh IDs in cur and the queue.
func (c *Client) bufferedLocked() int64 {
	t := c.now()
	var n int64
	if b := c.cur.Load(); b.expire >= t {
		n += b.remaining()
	}
	for _, b := range c.queue {
		if b.expire >= t {
			n += b.n
		}
	}
	return n
}

func (c *Client) kick() {
	select {
	case c.kickC <- struct{}{}:
	default:
	}
}

// Info returns the Info of the first endpoint that answers.
func (c *Client) Info(ctx context.Context) (*firnv1.InfoResponse, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.leave()
	var resp *firnv1.InfoResponse
	err := c.each(ctx, func(ctx context.Context, ep *endpoint) (err error) {
		resp, err = ep.ids.Info(ctx, &firnv1.InfoRequest{})
		return err
	})
	if err == nil && c.closing() {
		return nil, ErrClosed
	}
	return resp, err
}

// Decode splits id into its fields under the client's generator, asking
// the first endpoint that answers.
func (c *Client) Decode(ctx context.Context, id uint64) (*firnv1.DecodeResponse, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.leave()
	var resp *firnv1.DecodeResponse
	err := c.each(ctx, func(ctx context.Context, ep *endpoint) (err error) {
		resp, err = ep.ids.Decode(ctx, &firnv1.DecodeRequest{Generator: c.opts.generator, Id: id})
		return err
	})
	if err == nil && c.closing() {
		return nil, ErrClosed
	}
	return resp, err
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	buffered := c.bufferedLocked()
	c.mu.Unlock()
	return Stats{
		Buffered:    buffered,
		BatchSize:   int(c.stats.batchSize.Load()),
		Rate:        c.rate(),
		Fetches:     c.stats.fetches.Load(),
		FetchedIDs:  c.stats.fetchedIDs.Load(),
		FetchErrors: c.stats.fetchErrors.Load(),
		CallErrors:  c.stats.callErrors.Load(),
		Failovers:   c.stats.failovers.Load(),
		Dropped:     c.stats.dropped.Load(),
		Ticks:       c.stats.ticks.Load(),
		Endpoint:    c.activeAddr(),

		SeqCalls:        c.seq.calls.Load(),
		SeqRedirects:    c.seq.redirects.Load(),
		SeqRetries:      c.seq.retries.Load(),
		SeqMapRefreshes: c.seq.refreshes.Load(),
	}
}

func (c *Client) activeAddr() string {
	if ep := c.active.Load(); ep != nil {
		return ep.addr
	}
	if eps := c.endpointList(); len(eps) > 0 {
		return eps[0].addr
	}
	return ""
}

// Close stops the refiller and the health watches, ends the direct calls
// in flight (NextN, NextRange, Info, Decode, the sequence calls) and waits
// for them, and closes the connections (the section owners' dialled on
// demand too). IDs still buffered, and those of a call in
// flight, are dropped. Calls during and after Close return ErrClosed. Close returns the connections' close errors, and nil on later
// calls.
func (c *Client) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.mu.Lock()
		c.closed = true
		c.retireLocked(c.cur.Load())
		c.cur.Store(c.empty)
		for _, b := range c.queue {
			c.stats.dropped.Add(uint64(b.n))
		}
		c.queue = nil
		close(c.notify)
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		// A refill answered as Close began, which the refiller did not
		// take: its IDs are never handed out.
		for len(c.results) > 0 {
			if res := <-c.results; res.err == nil {
				c.stats.dropped.Add(countOf(res.runs))
			}
		}
		// Direct calls in flight: their attempts end with the client's
		// context, and each returns ErrClosed.
		c.calls.Lock()
		c.calls.Unlock()
		var errs []error
		if err := c.seqClose(); err != nil {
			errs = append(errs, err)
		}
		c.epMu.Lock()
		eps := c.endpointList()
		c.epMu.Unlock()
		for _, ep := range eps {
			if err := ep.stop(); err != nil {
				errs = append(errs, fmt.Errorf("client: close %s: %w", ep.addr, err))
			}
		}
		c.closeErr = errors.Join(errs...)
	})
	if !first {
		return nil
	}
	return c.closeErr
}

package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// Bounds of the sequence calls (firn.proto, NextSeqRequest).
const (
	// MaxSeqKey is the longest key, in bytes; a key is at least 1 byte.
	MaxSeqKey = 256
	// MaxSeqCount is the most values one NextSeq (or one NextSeqs item)
	// asks for.
	MaxSeqCount = 10000
)

const (
	// maxSeqItemsPerRPC is the most items one NextSeqs RPC carries (the
	// node's bound); a client call with more sends several.
	maxSeqItemsPerRPC = 1000
	// maxSeqHops is how many WRONG_NODE refusals in a row a call follows
	// at once; past it the call waits as for a section that moves.
	maxSeqHops = 3
	// seqRefreshEvery is how often the section map is read again while
	// sequence calls are made.
	seqRefreshEvery = 3 * time.Second
	// seqRefreshGap spaces the reads of the map that refusals ask for:
	// a node reads the owners every 200 ms.
	seqRefreshGap = 250 * time.Millisecond
	// seqLoadGap spaces the reads of the map a call makes itself while
	// the client has none.
	seqLoadGap = time.Second
	// seqRetryFor bounds the retries of a call whose context has no
	// deadline.
	seqRetryFor = 10 * time.Second
	// Waits after a refusal without RetryInfo: from seqBackoffMin,
	// doubling, up to seqBackoffMax.
	seqBackoffMin = 25 * time.Millisecond
	seqBackoffMax = time.Second
)

// SeqItem is one key of NextSeqs and the number of values it asks for
// (1 to MaxSeqCount).
type SeqItem struct {
	Key   []byte
	Count int
}

// SeqResult is one item's outcome in NextSeqs: the values First …
// First+Count-1 of its key, or Err, why it got none (Reason and
// RetryAfter read the node's cause from it).
type SeqResult struct {
	First uint64
	Count int
	Err   error
}

// seqHash is a key's 64-bit FNV-1a hash, as the nodes compute it: a key's
// section is seqHash(key) mod sections.
func seqHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

// seqMap is a sequence generator's section map as a node's Info gave it.
type seqMap struct {
	sections uint64   // 0: not known to be a sequence generator
	owners   []string // section → the owner's gRPC address ("" unknown)
}

// owner is the address of the owner of key's section ("" unknown), and
// the section (-1 without a map).
func (m *seqMap) owner(key []byte) (int, string) {
	if m == nil || m.sections == 0 {
		return -1, ""
	}
	s := seqHash(key) % m.sections
	return int(s), m.owners[s]
}

// withOwner is m with section s owned by addr.
func (m *seqMap) withOwner(s int, addr string) *seqMap {
	owners := append([]string(nil), m.owners...)
	owners[s] = addr
	return &seqMap{sections: m.sections, owners: owners}
}

// keepingKnown is m, but where m names no owner of a section that old (of
// as many sections) names, old's: an owner a WRONG_NODE named (seqHint)
// is not forgotten by a map read from a node that does not know it.
func (m *seqMap) keepingKnown(old *seqMap) *seqMap {
	if old == nil || old.sections != m.sections {
		return m
	}
	var owners []string
	for i, o := range m.owners {
		if o == "" && old.owners[i] != "" {
			if owners == nil {
				owners = append([]string(nil), m.owners...)
			}
			owners[i] = old.owners[i]
		}
	}
	if owners == nil {
		return m
	}
	return &seqMap{sections: m.sections, owners: owners}
}

// seqMapOf reads the client's generator's section map from info: an
// empty map when the generator is not a sequence generator (its calls
// then go to any endpoint, which refuses them naming the kind). An
// address a client cannot dial (an unspecified host, "0.0.0.0:7300") is
// left unknown.
func seqMapOf(info *firnv1.InfoResponse, generator string) *seqMap {
	for _, g := range info.GetGenerators() {
		if (generator == "" && !g.GetIsDefault()) || (generator != "" && g.GetName() != generator) {
			continue
		}
		if g.GetKind() != "seq" || g.GetSections() == 0 {
			return &seqMap{}
		}
		m := &seqMap{sections: uint64(g.GetSections()), owners: make([]string, g.GetSections())}
		for _, o := range g.GetSectionOwners() {
			if uint64(o.GetSection()) < m.sections && dialable(o.GetAddress()) {
				m.owners[o.GetSection()] = o.GetAddress()
			}
		}
		return m
	}
	return &seqMap{}
}

// dialable reports whether addr names a host a client can dial: a node
// that listens on a wildcard address ("0.0.0.0:7300", ":7300") gives
// that as its address.
func dialable(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return false
	}
	return true
}

// seqRouter is the client's routing of sequence calls: the section map,
// the connections to owners that are not endpoints, the map's refresher,
// and the counters.
type seqRouter struct {
	m atomic.Pointer[seqMap]

	mu       sync.Mutex
	conns    map[string]*ownerConn // owners dialled on demand
	running  bool                  // the refresher runs
	loading  chan struct{}         // closed when the load a call started ends
	lastLoad time.Time             // when a call last loaded the map itself
	wg       sync.WaitGroup        // the refresher

	kick chan struct{} // asks the refresher for a read now; buffered 1
	uses atomic.Uint64 // sequence calls made, for the refresher's idle check

	calls, redirects, retries, refreshes atomic.Uint64
}

// seqStart registers one sequence call: the map is loaded on first use
// (within ctx) and the refresher runs while calls are made.
func (c *Client) seqStart(ctx context.Context) {
	r := &c.seq
	r.calls.Add(1)
	r.uses.Add(1)
	r.mu.Lock()
	if !r.running && !c.closing() {
		r.running = true
		r.wg.Add(1)
		go c.seqRefresher()
	}
	r.mu.Unlock()
	c.seqEnsureMap(ctx)
}

// seqEnsureMap loads the map when the client has none: one load at a
// time (other calls wait for it within ctx), at most one a second. A
// call that finds none goes on without it: its key goes to any endpoint.
func (c *Client) seqEnsureMap(ctx context.Context) {
	r := &c.seq
	if r.m.Load() != nil {
		return
	}
	r.mu.Lock()
	if r.m.Load() != nil {
		r.mu.Unlock()
		return
	}
	if ch := r.loading; ch != nil {
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	if !r.lastLoad.IsZero() && time.Since(r.lastLoad) < seqLoadGap {
		r.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	r.loading, r.lastLoad = ch, time.Now()
	r.mu.Unlock()
	if err := c.seqRefresh(ctx); err != nil && !c.closing() {
		c.log.Warn("sequence section map not read; routing by refusals", "generator", c.opts.generator, "err", err)
	}
	r.mu.Lock()
	r.loading = nil
	r.mu.Unlock()
	close(ch)
}

// seqKick asks the refresher to read the map soon.
func (c *Client) seqKick() {
	select {
	case c.seq.kick <- struct{}{}:
	default:
	}
}

// seqRefresher reads the map every seqRefreshEvery while sequence calls
// are made, and when a refusal asks for it (at most every seqRefreshGap).
// It ends when a period passed without a call; the next call starts it
// again.
func (c *Client) seqRefresher() {
	r := &c.seq
	defer r.wg.Done()
	t := time.NewTimer(seqRefreshEvery)
	defer t.Stop()
	seen := r.uses.Load()
	var last time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-r.kick:
		case <-t.C:
			u := r.uses.Load()
			if u == seen {
				r.mu.Lock()
				if r.uses.Load() == seen {
					r.running = false
					r.mu.Unlock()
					return
				}
				r.mu.Unlock()
			}
			seen = r.uses.Load()
			t.Reset(seqRefreshEvery)
		}
		if wait := seqRefreshGap - time.Since(last); !last.IsZero() && wait > 0 {
			w := time.NewTimer(wait)
			select {
			case <-c.ctx.Done():
				w.Stop()
				return
			case <-w.C:
			}
		}
		ctx, cancel := context.WithTimeout(c.ctx, 2*c.opts.callTimeout)
		if err := c.seqRefresh(ctx); err != nil && !c.closing() {
			c.log.Warn("sequence section map not read", "generator", c.opts.generator, "err", err)
		}
		cancel()
		last = time.Now()
	}
}

// seqRefresh reads the section map from the first endpoint that answers
// Info, or, when none does, from an owner dialled on demand; then closes
// the connections to owners the map no longer names.
func (c *Client) seqRefresh(ctx context.Context) error {
	var info *firnv1.InfoResponse
	err := c.each(ctx, func(ctx context.Context, ep *endpoint) (err error) {
		info, err = ep.ids.Info(ctx, &firnv1.InfoRequest{})
		return err
	})
	if err != nil && !c.closing() && ctx.Err() == nil {
		c.seq.mu.Lock()
		conns := make(map[string]*ownerConn, len(c.seq.conns))
		for a, oc := range c.seq.conns {
			conns[a] = oc
		}
		c.seq.mu.Unlock()
		for addr, oc := range conns {
			a := c.seqAttempt(ctx, oc.owner())
			resp, ierr := oc.ids.Info(a.ctx, &firnv1.InfoRequest{})
			c.endAttempt(a)
			if ierr == nil {
				oc.answered.Store(true)
				info, err = resp, nil
				break
			}
			c.log.Debug("sequence section map: owner's Info failed", "owner", addr, "err", ierr)
		}
	}
	if err != nil {
		return err
	}
	if c.closing() {
		return ErrClosed
	}
	read := seqMapOf(info, c.opts.generator)
	var m *seqMap
	for {
		cur := c.seq.m.Load()
		if m = read.keepingKnown(cur); c.seq.m.CompareAndSwap(cur, m) {
			break
		}
	}
	c.seq.refreshes.Add(1)
	c.seqPrune(m)
	return nil
}

// seqPrune closes the connections to owners that m does not name.
func (c *Client) seqPrune(m *seqMap) {
	named := map[string]bool{}
	for _, a := range m.owners {
		named[a] = true
	}
	c.seq.mu.Lock()
	var gone []*grpc.ClientConn
	for a, oc := range c.seq.conns {
		if !named[a] {
			gone = append(gone, oc.cc)
			delete(c.seq.conns, a)
		}
	}
	c.seq.mu.Unlock()
	for _, cc := range gone {
		cc.Close()
	}
}

// seqClose closes the connections to owners (Close, once no call is in
// flight), after the refresher ended.
func (c *Client) seqClose() error {
	c.seq.wg.Wait()
	c.seq.mu.Lock()
	conns := c.seq.conns
	c.seq.conns = nil
	c.seq.mu.Unlock()
	var errs []error
	for a, oc := range conns {
		if err := oc.cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("client: close %s: %w", a, err))
		}
	}
	return errors.Join(errs...)
}

// ownerConn is a connection to a section owner that is not an endpoint.
type ownerConn struct {
	cc       *grpc.ClientConn
	ids      firnv1.IDServiceClient
	answered atomic.Bool // a call on it succeeded (see firstAnswerTimeout)
}

func (oc *ownerConn) owner() seqOwner { return seqOwner{oc.ids, &oc.answered} }

// seqOwner is where a sequence call goes: the owner's service and whether
// that connection has answered yet.
type seqOwner struct {
	ids      firnv1.IDServiceClient
	answered *atomic.Bool
}

// seqAttempt starts an attempt at o under ctx (the round's last: nothing
// follows a section's owner).
func (c *Client) seqAttempt(ctx context.Context, o seqOwner) *attempt {
	return c.startAttempt(ctx, true, false, !o.answered.Load())
}

// seqConn is the connection to addr: the endpoint's when addr is one,
// else one dialled on demand with the endpoints' dial options and cached
// until Close (or until the map no longer names it).
func (c *Client) seqConn(addr string) (seqOwner, error) {
	for _, ep := range c.endpointList() {
		if ep.addr == addr {
			return seqOwner{ep.ids, &ep.answered}, nil
		}
	}
	if addr == "" {
		return seqOwner{}, status.Error(codes.Unavailable, "no endpoint: the DNS names given resolved to no address yet")
	}
	c.seq.mu.Lock()
	defer c.seq.mu.Unlock()
	if c.closing() {
		return seqOwner{}, ErrClosed
	}
	if oc, ok := c.seq.conns[addr]; ok {
		return oc.owner(), nil
	}
	cc, err := grpc.NewClient(addr, c.dial...)
	if err != nil {
		return seqOwner{}, fmt.Errorf("client: section owner %q: %w", addr, err)
	}
	if c.seq.conns == nil {
		c.seq.conns = map[string]*ownerConn{}
	}
	oc := &ownerConn{cc: cc, ids: firnv1.NewIDServiceClient(cc)}
	c.seq.conns[addr] = oc
	return oc.owner(), nil
}

// seqRoute is where a key goes: the hint (the owner a refusal named),
// else the map's owner of its section, else an endpoint (the n-th in the
// order of a round: a call that asks again asks the next), which refuses
// naming the owner or saying that the section moves.
func (c *Client) seqRoute(key []byte, hint string, n int) string {
	if hint != "" {
		return hint
	}
	if _, addr := c.seq.m.Load().owner(key); addr != "" {
		return addr
	}
	all := c.endpointList()
	if len(all) == 0 {
		return ""
	}
	_, mono := c.clock.Now()
	var usable, rest []*endpoint
	first := 0
	for i, ep := range all {
		if ep == c.active.Load() {
			first = i
		}
	}
	for i := range all {
		ep := all[(first+i)%len(all)]
		if ep.usable(mono) {
			usable = append(usable, ep)
		} else {
			rest = append(rest, ep)
		}
	}
	order := append(usable, rest...)
	return order[n%len(order)].addr
}

// seqHint records that section s of key's map is owned by addr, as a
// WRONG_NODE refusal said.
func (c *Client) seqHint(key []byte, addr string) {
	for {
		m := c.seq.m.Load()
		s, cur := m.owner(key)
		if s < 0 || cur == addr {
			return
		}
		if c.seq.m.CompareAndSwap(m, m.withOwner(s, addr)) {
			return
		}
	}
}

// What a sequence call does after a refusal.
type seqNext int

const (
	seqFinal    seqNext = iota // return it
	seqRedirect                // WRONG_NODE: ask the owner it names
	seqRetry                   // the owner cannot answer now: wait and ask again
)

// seqClassify sorts a failed sequence RPC's error: WRONG_NODE follows the
// owner; UNAVAILABLE (SECTION_MOVING, a node that does not serve, a
// connection error), a shed, and an attempt's own time running out while
// the caller still waits are retried: only the owner can answer.
func seqClassify(ctx context.Context, err error) seqNext {
	if Reason(err) == firnv1.ErrorReason_WRONG_NODE {
		return seqRedirect
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return seqRetry
	case codes.ResourceExhausted:
		if Reason(err) == firnv1.ErrorReason_OVERLOADED {
			return seqRetry
		}
	case codes.DeadlineExceeded, codes.Canceled:
		if ctx.Err() == nil {
			return seqRetry
		}
	}
	return seqFinal
}

// seqOwnerOf is the owner a WRONG_NODE refusal names.
func seqOwnerOf(err error) string {
	info, _ := details(err)
	return info.GetMetadata()["owner"]
}

// seqTry is one call's (or one NextSeqs item's) retry state.
type seqTry struct {
	hint    string        // the owner the last WRONG_NODE named
	hops    int           // WRONG_NODE refusals followed in a row
	backoff time.Duration // the next wait without RetryInfo
	anyN    int           // endpoints asked for a key without a known owner
	at      time.Time     // not asked again before
	last    error         // the last refusal
	// reasoned is the last refusal that named its reason: it wins over
	// an attempt the caller's own deadline cut short (that says nothing
	// new).
	reasoned error
}

// lastRefusal is what a call (or item) the caller's context ended is
// told besides: the owner's last refusal that named its reason, else the
// last refusal (nil: none).
func (t *seqTry) lastRefusal() error {
	if t.reasoned != nil {
		return t.reasoned
	}
	return t.last
}

// seqCallerDone is the error of a call whose context ended (done, as
// callerDone says): with the owner's last refusal when there was one.
func seqCallerDone(done error, t *seqTry) error {
	if last := t.lastRefusal(); last != nil {
		return fmt.Errorf("%w (last refusal: %w)", done, last)
	}
	return done
}

// seqAfter decides what follows err, the refusal at addr (of class
// next): the owner to ask at once (a redirect: wait 0), or the wait
// before asking again; stop, when not nil, is the error to return now
// (err itself, or why a redirect cannot be followed).
func (c *Client) seqAfter(t *seqTry, key []byte, addr string, err error, next seqNext) (wait time.Duration, stop error) {
	t.last = err
	if Reason(err) != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED && next != seqRedirect {
		t.reasoned = err
	}
	if next == seqRedirect {
		c.seq.redirects.Add(1)
		c.seqKick()
		owner := seqOwnerOf(err)
		if !dialable(owner) {
			return 0, fmt.Errorf("client: the section's owner gives an address a client cannot dial (%q; does it listen on a wildcard address?): %w", owner, err)
		}
		c.seqHint(key, owner)
		t.hops++
		if t.hops <= maxSeqHops && owner != addr {
			t.hint = owner
			return 0, nil
		}
		// Nodes that disagree about the owner (the map moves under
		// them): wait as for a move.
	}
	if next == seqFinal {
		return 0, err
	}
	c.seq.retries.Add(1)
	c.seqKick()
	if t.hint == "" {
		if _, o := c.seq.m.Load().owner(key); o == "" {
			t.anyN++ // no owner known: ask another endpoint next
		}
	}
	t.hint, t.hops = "", 0
	if d, ok := RetryAfter(err); ok {
		wait = min(max(d, 10*time.Millisecond), maxRetryWait)
	} else {
		if t.backoff == 0 {
			t.backoff = seqBackoffMin
		}
		// ±25% jitter, so that the callers of one section spread out.
		wait = t.backoff*3/4 + rand.N(t.backoff/2+1)
		t.backoff = min(2*t.backoff, seqBackoffMax)
	}
	return wait, nil
}

// seqEnd is when a call stops retrying: its context's deadline, or
// seqRetryFor from now without one.
func seqEnd(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(seqRetryFor)
}

// seqGiveUp is the error of a call (or item) that stops retrying: the
// last refusal, wrapped so that Reason and RetryAfter read it.
func seqGiveUp(wait time.Duration, err error) error {
	if wait <= 0 {
		return err
	}
	return fmt.Errorf("%w: the section's owner cannot answer now, and the wait it asks (%v) would pass the deadline: %w",
		ErrUnavailable, wait.Round(time.Millisecond), err)
}

// seqSleep waits d, or until ctx or the client ends (false).
func (c *Client) seqSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.ctx.Done():
		return false
	}
}

// checkSeq refuses a key or count out of bounds, naming the bound.
func checkSeq(key []byte, count int) error {
	if len(key) < 1 || len(key) > MaxSeqKey {
		return fmt.Errorf("%w: key is %d bytes: a key is 1 to %d bytes", ErrInvalidKey, len(key), MaxSeqKey)
	}
	if count < 1 || count > MaxSeqCount {
		return fmt.Errorf("%w: count %d outside [1, %d]", ErrInvalidCount, count, MaxSeqCount)
	}
	return nil
}

// seqDo runs call for key at its owner, following WRONG_NODE and
// retrying as seqAfter says, until it succeeds, fails for good, or the
// wait would pass ctx's deadline.
func (c *Client) seqDo(ctx context.Context, key []byte, call func(ctx context.Context, ids firnv1.IDServiceClient) error) error {
	c.seqStart(ctx)
	end := seqEnd(ctx)
	var t seqTry
	for {
		addr := c.seqRoute(key, t.hint, t.anyN)
		o, err := c.seqConn(addr)
		if err == nil {
			a := c.seqAttempt(ctx, o)
			err = call(a.ctx, o.ids)
			c.endAttempt(a)
			if err == nil {
				o.answered.Store(true)
				return nil
			}
		}
		if c.closing() {
			return ErrClosed
		}
		if done := callerDone(ctx); done != nil {
			// The caller's deadline ended the attempt (or passed as it
			// failed): the owner's last refusal (this attempt's, when the
			// node answered with its reason) says why.
			if Reason(err) != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
				t.reasoned = &EndpointError{Endpoint: addr, Err: err}
			}
			return seqCallerDone(done, &t)
		}
		next := seqClassify(ctx, err)
		err = &EndpointError{Endpoint: addr, Err: err}
		wait, stop := c.seqAfter(&t, key, addr, err, next)
		if stop != nil {
			return stop
		}
		if wait == 0 {
			continue
		}
		if time.Now().Add(wait).After(end) {
			return seqGiveUp(wait, err)
		}
		if !c.seqSleep(ctx, wait) {
			if c.closing() {
				return ErrClosed
			}
			return seqCallerDone(ctx.Err(), &t)
		}
	}
}

// NextSeq hands out count values (1 to MaxSeqCount) of key's sequence in
// the client's generator, a sequence generator (--generator NAME=seq):
// first … first+count-1. For one key, values strictly increase in real
// time — a call that returned before another began got smaller values —
// whichever client or node served them: the nodes promise it, the client
// only routes. Nothing is prefetched: every call asks the node that owns
// key's section, found in the section map (read from Info on first use,
// then every few seconds while sequence calls are made, and at once after
// a refusal). A WRONG_NODE refusal is followed to the owner it names (at
// most 3 in a row); a section that moves (SECTION_MOVING), or an owner
// that does not answer, is asked again after the wait its RetryInfo gives
// (else a growing backoff), until ctx's deadline (10 s without one): a
// call whose next wait would pass the deadline fails at once with
// ErrUnavailable wrapping the last refusal. Errors: ErrInvalidKey,
// ErrInvalidCount, a node's refusal (an EndpointError: Reason and
// RetryAfter read it; INVALID_ARGUMENT for a generator of another kind),
// ctx's error, ErrClosed.
func (c *Client) NextSeq(ctx context.Context, key []byte, count int) (first uint64, err error) {
	if err := checkSeq(key, count); err != nil {
		return 0, err
	}
	if !c.enter() {
		return 0, ErrClosed
	}
	defer c.leave()
	err = c.seqDo(ctx, key, func(ctx context.Context, ids firnv1.IDServiceClient) error {
		resp, err := ids.NextSeq(ctx, &firnv1.NextSeqRequest{Generator: c.opts.generator, Key: key, Count: uint32(count)})
		if err != nil {
			return err
		}
		if int(resp.GetCount()) != count {
			return status.Errorf(codes.Internal, "NextSeq answered %d values, asked %d", resp.GetCount(), count)
		}
		first = resp.GetFirst()
		return nil
	})
	if err == nil && c.closing() {
		return 0, ErrClosed
	}
	return first, err
}

// CurrentSeq returns a value at or above every value handed out for key
// in the client's generator, without handing one out (0 for a key never
// used in a section that never moved). It is routed and retried as
// NextSeq; errors as for NextSeq.
func (c *Client) CurrentSeq(ctx context.Context, key []byte) (uint64, error) {
	if err := checkSeq(key, 1); err != nil {
		return 0, err
	}
	if !c.enter() {
		return 0, ErrClosed
	}
	defer c.leave()
	var v uint64
	err := c.seqDo(ctx, key, func(ctx context.Context, ids firnv1.IDServiceClient) error {
		resp, err := ids.CurrentSeq(ctx, &firnv1.CurrentSeqRequest{Generator: c.opts.generator, Key: key})
		if err != nil {
			return err
		}
		v = resp.GetValue()
		return nil
	})
	if err == nil && c.closing() {
		return 0, ErrClosed
	}
	return v, err
}

// seqChunk is one NextSeqs RPC: the indexes, in the caller's items, of
// the items it carries, in order, and the address it goes to.
type seqChunk struct {
	addr string
	idx  []int
}

// splitSeq groups the items idx by the address addrOf gives each, in the
// order each address first appears, keeping the items' order within an
// address, and cuts each group into chunks of at most max items.
func splitSeq(idx []int, addrOf func(i int) string, maxItems int) []seqChunk {
	var order []string
	groups := map[string][]int{}
	for _, i := range idx {
		a := addrOf(i)
		if _, ok := groups[a]; !ok {
			order = append(order, a)
		}
		groups[a] = append(groups[a], i)
	}
	var out []seqChunk
	for _, a := range order {
		g := groups[a]
		for len(g) > 0 {
			n := min(len(g), maxItems)
			out = append(out, seqChunk{addr: a, idx: g[:n:n]})
			g = g[n:]
		}
	}
	return out
}

// placeSeq puts the results of chunk ch, answered by ch.addr, into out
// at the items' places: each a run of values (checked against the count
// asked) or the item's refusal as an error Reason and RetryAfter read.
// It fails when the answer does not hold one result per item.
func placeSeq(out []SeqResult, items []SeqItem, ch seqChunk, results []*firnv1.SeqResult) error {
	if len(results) != len(ch.idx) {
		return status.Errorf(codes.Internal, "NextSeqs answered %d results for %d items", len(results), len(ch.idx))
	}
	for k, i := range ch.idx {
		r := results[k]
		switch {
		case r.GetReason() != "" || r.GetError() != "":
			out[i] = SeqResult{Err: &EndpointError{Endpoint: ch.addr, Err: seqItemError(r)}}
		case int(r.GetCount()) != items[i].Count:
			out[i] = SeqResult{Err: &EndpointError{Endpoint: ch.addr,
				Err: status.Errorf(codes.Internal, "NextSeqs answered %d values, asked %d", r.GetCount(), items[i].Count)}}
		default:
			out[i] = SeqResult{First: r.GetFirst(), Count: int(r.GetCount())}
		}
	}
	return nil
}

// seqItemError is a refused item as the gRPC status a NextSeq of the same
// key would have been refused with: the code the node maps the reason to,
// the reason and owner in an ErrorInfo, the retry delay in a RetryInfo.
func seqItemError(r *firnv1.SeqResult) error {
	reason := firnv1.ErrorReason(firnv1.ErrorReason_value[r.GetReason()])
	code := codes.Unavailable // every cause of a generator that does not serve
	switch reason {
	case firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		code = codes.Unknown
	case firnv1.ErrorReason_BAD_REQUEST:
		code = codes.InvalidArgument
	case firnv1.ErrorReason_NOT_FOUND:
		code = codes.NotFound
	case firnv1.ErrorReason_WRONG_NODE:
		code = codes.FailedPrecondition
	case firnv1.ErrorReason_OVERLOADED:
		code = codes.ResourceExhausted
	}
	st := status.New(code, r.GetError())
	var ds []protoadapt.MessageV1
	if r.GetReason() != "" {
		info := &errdetails.ErrorInfo{Domain: ErrorDomain, Reason: r.GetReason()}
		if r.GetOwner() != "" {
			info.Metadata = map[string]string{"owner": r.GetOwner()}
		}
		ds = append(ds, info)
	}
	if d := r.GetRetryAfter(); d != nil {
		ds = append(ds, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.AsDuration())})
	}
	if len(ds) > 0 {
		if with, err := st.WithDetails(ds...); err == nil {
			st = with
		}
	}
	return st.Err()
}

// NextSeqs hands out values of many keys' sequences in one call: one
// SeqResult per item, in the items' order, each as NextSeq would (the
// same per-key order, from the nodes). The items are split by the owner
// of their key's section and each owner is sent one NextSeqs (several
// past 1000 items), all at once; an item refused WRONG_NODE, or because
// its section moves or its owner does not answer, is retried as NextSeq
// retries, within ctx's deadline, alone; any other refusal (a bad key or
// count, checked here first) is that item's Err, and the other items are
// served. An item not served by the deadline carries the last refusal
// (or ctx's error). The error is for the call as a whole: no items
// (ErrInvalidCount), a node's refusal of the whole request (NOT_FOUND, a
// generator of another kind), ErrClosed; values handed out to the other
// items are then lost.
func (c *Client) NextSeqs(ctx context.Context, items []SeqItem) ([]SeqResult, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: no items: NextSeqs takes at least 1", ErrInvalidCount)
	}
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.leave()
	out := make([]SeqResult, len(items))
	tries := make([]seqTry, len(items))
	var pending []int
	for i, it := range items {
		if err := checkSeq(it.Key, it.Count); err != nil {
			out[i].Err = err
			continue
		}
		pending = append(pending, i)
	}
	if len(pending) == 0 {
		return out, nil
	}
	c.seqStart(ctx)
	end := seqEnd(ctx)
	for len(pending) > 0 {
		now := time.Now()
		var due, later []int
		for _, i := range pending {
			if tries[i].at.After(now) {
				later = append(later, i)
			} else {
				due = append(due, i)
			}
		}
		if len(due) > 0 {
			chunks := splitSeq(due, func(i int) string { return c.seqRoute(items[i].Key, tries[i].hint, tries[i].anyN) }, maxSeqItemsPerRPC)
			errs := c.sendSeqs(ctx, items, chunks, out)
			if c.closing() {
				return nil, ErrClosed
			}
			for k, ch := range chunks {
				for _, i := range ch.idx {
					err, next := errs[k], seqFinal
					if err != nil {
						next = seqClassify(ctx, err)
						reasoned := Reason(err) != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED
						if callerDone(ctx) != nil && (next != seqRetry || !reasoned) {
							// The caller's deadline ended this chunk: its
							// items carry it (below), the other chunks'
							// served items stay the caller's.
							tries[i].last = &EndpointError{Endpoint: ch.addr, Err: err}
							if reasoned {
								tries[i].reasoned = tries[i].last
							}
							out[i] = SeqResult{}
							later = append(later, i)
							continue
						}
						if next != seqRetry {
							// The whole request refused: the call's error.
							return nil, &EndpointError{Endpoint: ch.addr, Err: err}
						}
						err = &EndpointError{Endpoint: ch.addr, Err: err}
						out[i] = SeqResult{}
					} else if out[i].Err == nil {
						continue // served
					} else {
						err = out[i].Err
						next = seqClassify(ctx, err)
					}
					wait, stop := c.seqAfter(&tries[i], items[i].Key, ch.addr, err, next)
					switch {
					case stop != nil:
						out[i].Err = stop
					case time.Now().Add(wait).After(end):
						out[i].Err = seqGiveUp(wait, err)
					default:
						out[i].Err = nil
						tries[i].at = time.Now().Add(wait)
						later = append(later, i)
					}
				}
			}
		}
		pending = later
		if len(pending) == 0 {
			break
		}
		if callerDone(ctx) != nil {
			break
		}
		first := tries[pending[0]].at
		for _, i := range pending[1:] {
			if tries[i].at.Before(first) {
				first = tries[i].at
			}
		}
		if d := time.Until(first); d > 0 && !c.seqSleep(ctx, d) {
			if c.closing() {
				return nil, ErrClosed
			}
			break
		}
	}
	for _, i := range pending { // the caller's context ended
		done := callerDone(ctx)
		if done == nil {
			done = ctx.Err()
		}
		out[i] = SeqResult{Err: seqCallerDone(done, &tries[i])}
	}
	return out, nil
}

// sendSeqs sends every chunk's NextSeqs at once, each as an attempt of
// its own, and places the results in out; the error of each chunk whose
// RPC failed (nil for the others).
func (c *Client) sendSeqs(ctx context.Context, items []SeqItem, chunks []seqChunk, out []SeqResult) []error {
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for k, ch := range chunks {
		wg.Add(1)
		go func(k int, ch seqChunk) {
			defer wg.Done()
			o, err := c.seqConn(ch.addr)
			if err != nil {
				errs[k] = err
				return
			}
			req := &firnv1.NextSeqsRequest{Generator: c.opts.generator, Items: make([]*firnv1.SeqItem, len(ch.idx))}
			for j, i := range ch.idx {
				req.Items[j] = &firnv1.SeqItem{Key: items[i].Key, Count: uint32(items[i].Count)}
			}
			a := c.seqAttempt(ctx, o)
			resp, err := o.ids.NextSeqs(a.ctx, req)
			c.endAttempt(a)
			if err == nil {
				o.answered.Store(true)
				err = placeSeq(out, items, ch, resp.GetResults())
			}
			errs[k] = err
		}(k, ch)
	}
	wg.Wait()
	return errs
}

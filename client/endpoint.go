package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// Health of an endpoint as its grpc.health.v1 service last said.
const (
	healthUnknown    int32 = iota // not heard yet, no health service, or the watch broke
	healthServing                 // SERVING
	healthNotServing              // NOT_SERVING
)

const (
	// downFor is how long an endpoint that failed an attempt (UNAVAILABLE,
	// a connection error, or no answer by the deadline it was sent; see
	// countsAgainst) is tried only after the others, when it gave no
	// RetryInfo.
	downFor = time.Second
	// minAttempt is the least time an attempt at an endpoint gets before
	// a waiting caller's deadline may cut it to fail over. It equals the
	// smallest CallTimeout.
	minAttempt = minCallTimeout
	// firstAnswerTimeout bounds, in place of a shorter CallTimeout, the
	// last attempt of a round at an endpoint that has not answered yet:
	// its connection, TLS handshake and first calls are inside it, and a
	// process starting on a loaded machine can take seconds over them. A
	// caller's deadline still cuts it.
	firstAnswerTimeout = 10 * time.Second
	// Health watches that break retry from watchRetryMin to watchRetryMax.
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

type endpoint struct {
	addr   string
	from   string // the target it came from (a DNS name, or addr itself)
	conn   *grpc.ClientConn
	ids    firnv1.IDServiceClient
	health healthpb.HealthClient

	status    atomic.Int32 // healthUnknown, healthServing, healthNotServing
	heard     atomic.Bool  // the watch (or a Check) delivered a status
	noHealth  atomic.Bool  // the endpoint has no health service (UNIMPLEMENTED): nothing to check
	downUntil atomic.Int64 // mono nanoseconds
	// retryUntil (mono nanoseconds) is when the endpoint said, with a
	// RetryInfo, it would serve again: until then no round asks it, and
	// after it one round at a time (probing) until it answers. refusal is
	// that answer.
	retryUntil atomic.Int64
	probing    atomic.Bool
	refusal    atomic.Pointer[status.Status]
	// maxBatch and maxRange are the endpoint's largest NextIDs and
	// NextRange counts: 0 not asked yet (maxBatch), -1 unknown (no Info,
	// or an Info without the field), else from Info or lowered by
	// INVALID_ARGUMENT. maxRange is set before maxBatch, so a maxBatch
	// not 0 means both were learnt.
	maxBatch atomic.Int64
	maxRange atomic.Int64
	// noRangeUntil (mono nanoseconds) is when NextRange may be asked again
	// after the endpoint answered it UNIMPLEMENTED (a node of an older
	// version); until then the endpoint is asked NextIDs.
	noRangeUntil atomic.Int64

	// ctx ends the endpoint's health watch: when the client closes, or
	// when the endpoint leaves the list (stop).
	ctx    context.Context
	cancel context.CancelFunc

	// answered is set once an attempt at the endpoint succeeded (see
	// firstAnswerTimeout).
	answered atomic.Bool
}

func newEndpoint(addr string, conn *grpc.ClientConn) *endpoint {
	return &endpoint{
		addr:   addr,
		conn:   conn,
		ids:    firnv1.NewIDServiceClient(conn),
		health: healthpb.NewHealthClient(conn),
	}
}

// stop ends the endpoint's health watch and closes its connection (calls
// in flight on it fail over).
func (ep *endpoint) stop() error {
	ep.cancel()
	return ep.conn.Close()
}

// usable reports whether ep is worth trying in a round's first pass.
func (ep *endpoint) usable(mono time.Duration) bool {
	if ep.status.Load() == healthNotServing {
		return false
	}
	if int64(mono) < ep.downUntil.Load() {
		return false
	}
	return ep.conn.GetState() != connectivity.TransientFailure
}

func healthStatus(s healthpb.HealthCheckResponse_ServingStatus) int32 {
	switch s {
	case healthpb.HealthCheckResponse_SERVING:
		return healthServing
	case healthpb.HealthCheckResponse_NOT_SERVING:
		return healthNotServing
	}
	// SERVICE_UNKNOWN, UNKNOWN: the ID calls will tell.
	return healthUnknown
}

func (c *Client) service() string { return c.opts.generator }

// watchHealth follows ep's grpc.health.v1 Watch for the client's
// generator, reconnecting with backoff when the stream breaks. A server
// without a health service leaves the endpoint's health unknown.
func (c *Client) watchHealth(ep *endpoint) {
	defer c.wg.Done()
	retry := watchRetryMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		stream, err := ep.health.Watch(ep.ctx, &healthpb.HealthCheckRequest{Service: c.service()})
		for err == nil {
			var resp *healthpb.HealthCheckResponse
			resp, err = stream.Recv()
			if err == nil {
				c.setHealth(ep, healthStatus(resp.GetStatus()))
				retry = watchRetryMin
			}
		}
		if ep.ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			c.log.Info("endpoint has no health service", "endpoint", ep.addr)
			ep.noHealth.Store(true)
			c.setHealth(ep, healthUnknown)
			return
		}
		c.setHealth(ep, healthUnknown)
		timer.Reset(retry)
		select {
		case <-ep.ctx.Done():
			return
		case <-timer.C:
		}
		retry = min(2*retry, watchRetryMax)
	}
}

func (c *Client) setHealth(ep *endpoint, s int32) {
	ep.heard.Store(s != healthUnknown)
	if old := ep.status.Swap(s); old != s {
		names := [...]string{"unknown", "serving", "not-serving"}
		c.log.Info("endpoint health", "endpoint", ep.addr, "health", names[s], "was", names[old])
	}
}

// A round is the endpoints one fetch or call tries, in order: the active
// one first, then the others in turn; usable ones before the rest (health
// may be stale, so an unusable endpoint is still tried last). An endpoint
// that asked the client to wait (RetryInfo) is not listed until that time
// has passed, and then by one round at a time (probes) until it answers:
// however many callers there are, a node that sheds is asked once per
// RetryInfo it gives.
type round struct {
	eps    []*endpoint
	probes []*endpoint
}

// order lists a round's endpoints; held is the error to answer when every
// endpoint asked the client to wait (nil otherwise). end must be called
// when the round is over.
func (c *Client) order(mono time.Duration) (r round, held error) {
	all := c.endpointList()
	n := len(all)
	first := max(slices.Index(all, c.active.Load()), 0)
	r.eps = make([]*endpoint, 0, n)
	var later []*endpoint
	var wait *endpoint
	for i := range n {
		ep := all[(first+i)%n]
		until := time.Duration(ep.retryUntil.Load())
		switch {
		case until > mono || (until != 0 && !ep.probing.CompareAndSwap(false, true)):
			// Asked to wait, or another round is asking it now.
			if wait == nil || until < time.Duration(wait.retryUntil.Load()) {
				wait = ep
			}
			continue
		case until != 0:
			r.probes = append(r.probes, ep)
		}
		if ep.usable(mono) {
			r.eps = append(r.eps, ep)
		} else {
			later = append(later, ep)
		}
	}
	r.eps = append(r.eps, later...)
	if len(r.eps) == 0 && wait != nil {
		return r, c.heldError(wait, n, mono)
	}
	return r, nil
}

// served records that ep answered: whatever it asked the client to wait
// for is over.
func (ep *endpoint) served() {
	ep.retryUntil.Store(0)
	ep.answered.Store(true)
}

// end releases the round's probes.
func (r round) end() {
	for _, ep := range r.probes {
		ep.probing.Store(false)
	}
}

// heldError is the error of a round that asked no endpoint because each
// of the n asked the client to wait (or is being asked by another round):
// ep's refusal (the one free first), its RetryInfo the time still left
// (at least 10ms).
func (c *Client) heldError(ep *endpoint, n int, mono time.Duration) error {
	left := max(time.Duration(ep.retryUntil.Load())-mono, 10*time.Millisecond)
	err := status.Errorf(codes.Unavailable, "asked to wait")
	if st := ep.refusal.Load(); st != nil {
		p := st.Proto()
		kept := p.Details[:0:0]
		for _, d := range p.Details {
			if !d.MessageIs(&errdetails.RetryInfo{}) {
				kept = append(kept, d)
			}
		}
		p.Details = kept
		s := status.FromProto(p)
		if with, werr := s.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(left)}); werr == nil {
			s = with
		}
		err = s.Err()
	}
	return fmt.Errorf("%w (%d endpoints, each asked the client to wait; none asked, the first free in %v): %w",
		ErrUnavailable, n, left.Round(time.Millisecond), &EndpointError{Endpoint: ep.addr, Err: err})
}

// heldUntil is, when every endpoint asked the client to wait, the one
// free first and the monotonic reading at which it is.
func (c *Client) heldUntil(mono time.Duration) (*endpoint, time.Duration, bool) {
	eps := c.endpointList()
	if len(eps) == 0 {
		return nil, 0, false
	}
	var first *endpoint
	var at time.Duration
	for _, ep := range eps {
		until := time.Duration(ep.retryUntil.Load())
		if until <= mono {
			return nil, 0, false // free, or asked by a round now
		}
		if first == nil || until < at {
			first, at = ep, until
		}
	}
	return first, at, true
}

// failover reports whether err from one endpoint sends the request to the
// next: UNAVAILABLE (not serving, or the connection failed), and an
// attempt that ran out of its time while the caller still waits.
func failover(ctx context.Context, err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		// A node that sheds load (OVERLOADED) says so at once: another
		// node may have room. Any other RESOURCE_EXHAUSTED (a message
		// too large) is the request's own.
		return Reason(err) == firnv1.ErrorReason_OVERLOADED
	case codes.DeadlineExceeded, codes.Canceled:
		return ctx.Err() == nil
	}
	return false
}

// countsAgainst reports whether an attempt that failed with err counts
// against its endpoint: UNAVAILABLE and a shed (OVERLOADED) always, no
// answer only when the endpoint missed the deadline the attempt sent it
// (missed). The deadline a request carries is the bound a node promises:
// a firn node answers within it or refuses at once (it sheds a request it
// could not serve in time). An attempt that ended earlier — a caller gave
// up, or a waiting caller cut a shared refill short to fail over — says
// nothing against the endpoint, which was never told that bound.
func countsAgainst(err error, missed bool) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		return Reason(err) == firnv1.ErrorReason_OVERLOADED
	case codes.DeadlineExceeded, codes.Canceled:
		return missed
	}
	return false
}

// shrinkBatch has the refiller halve its batch size.
func (c *Client) shrinkBatch() {
	c.overloads.Add(1)
	c.kick()
}

// maxRetryWait bounds how long an endpoint that asked the client to wait
// (RetryInfo) is left alone, whatever it said.
const maxRetryWait = 5 * time.Second

// markDown puts ep behind the other endpoints for downFor. An endpoint
// whose refusal carries a RetryInfo (a shed, or a node that knows when it
// serves again) is instead not asked at all for as long as it said (at
// least 10ms, at most maxRetryWait). A shed (OVERLOADED) also halves the
// batch size the client asks for.
func (c *Client) markDown(ep *endpoint, err error, why string) {
	_, mono := c.clock.Now()
	down := downFor
	if d, ok := RetryAfter(err); ok {
		down = min(max(d, 10*time.Millisecond), maxRetryWait)
		if st, ok := status.FromError(err); ok {
			ep.refusal.Store(st)
		}
		ep.retryUntil.Store(int64(mono + down))
	}
	if Reason(err) == firnv1.ErrorReason_OVERLOADED {
		c.shrinkBatch()
	}
	ep.downUntil.Store(int64(mono + down))
	c.log.Warn("endpoint failed", "endpoint", ep.addr, "code", status.Code(err).String(), "why", why, "for", down, "err", err)
}

// errCut is the cause of an attempt's context when its time ran out.
var errCut = errors.New("attempt cut off")

// errMissed is the cause of an attempt's context when the deadline it
// sent the endpoint passed.
var errMissed = errors.New("no answer by the deadline sent")

// An attempt is one try at one endpoint in a failover round. Its RPCs
// (on the endpoint's first use a health check and Info, then NextRange or
// NextIDs) run under one context whose deadline, sent with each RPC, is
// fixed at the start: CallTimeout after it, or earlier by a caller's
// deadline (see shareEnd). A shared refill may be cut earlier still, by a
// caller that starts waiting for it (cutAttemptsLocked).
type attempt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   context.CancelFunc // releases the deadline context
	start  time.Time
	sent   time.Time // the deadline the RPCs carry
	// last is set when no endpoint follows in the round: a caller's
	// deadline never cuts it (there is nothing to fail over to).
	last bool
	// refill attempts are shared by every waiting caller and listed in
	// Client.attempts; cutAt and timer are then guarded by Client.mu.
	refill bool
	cutAt  time.Time
	timer  *time.Timer // nil until a cut before sent
	// stopClose unhooks a direct call's attempt from the client's close.
	stopClose func() bool
}

// shareEnd is the latest cut-off that a caller with deadline d, seen at
// now, allows an attempt that another endpoint follows: half of the
// caller's remaining time, but at least minAttempt, so the other half is
// left for the next endpoint.
func shareEnd(now, d time.Time) time.Time {
	return now.Add(max(d.Sub(now)/2, minAttempt))
}

// startAttempt starts an attempt under ctx; last and refill as in
// attempt. fresh says the endpoint has not answered yet: the round's last
// attempt then gets firstAnswerTimeout if CallTimeout is shorter. A shared refill's deadline takes the share of the most patient
// caller waiting for it (waitShareLocked), not of the most impatient: one
// caller in a hurry does not shorten what the others wait for. Caller
// deadlines are in the machine's time (as context's are), so attempts are
// timed with it, not with the injected Clock.
func (c *Client) startAttempt(ctx context.Context, last, refill, fresh bool) *attempt {
	now := time.Now()
	a := &attempt{start: now, last: last, refill: refill}
	timeout := c.opts.callTimeout
	if fresh && last {
		timeout = max(timeout, firstAnswerTimeout)
	}
	end := now.Add(timeout)
	if d, ok := ctx.Deadline(); ok && !last {
		end = earliest(end, shareEnd(now, d))
	}
	if refill {
		c.mu.Lock()
		if share, ok := c.waitShareLocked(now); ok && !last {
			end = earliest(end, share)
		}
	}
	dctx, stop := context.WithDeadlineCause(ctx, end, errMissed)
	a.ctx, a.cancel = context.WithCancelCause(dctx)
	a.stop = stop
	a.sent, _ = a.ctx.Deadline()
	a.cutAt = a.sent
	if !refill {
		// A direct call's attempt also ends when the client closes.
		cancel := a.cancel
		a.stopClose = context.AfterFunc(c.ctx, func() { cancel(ErrClosed) })
		return a
	}
	c.attempts[a] = struct{}{}
	c.mu.Unlock()
	return a
}

// endAttempt releases a and reports how long it ran, whether the
// endpoint missed the deadline it was sent, and whether the attempt was
// cut short before that deadline (by a waiting caller, to fail over).
func (c *Client) endAttempt(a *attempt) (ran time.Duration, missed, cut bool) {
	if a.refill {
		c.mu.Lock()
		delete(c.attempts, a)
		if a.timer != nil {
			a.timer.Stop()
		}
		c.mu.Unlock()
	}
	if a.stopClose != nil {
		a.stopClose()
	}
	cause := context.Cause(a.ctx)
	cut = cause == errCut
	// The deadline passed: the endpoint (whose own deadline, from the
	// same timeout, ends no earlier) may answer DEADLINE_EXCEEDED before
	// this context sees it.
	missed = !cut && cause != ErrClosed && !time.Now().Before(a.sent)
	a.cancel(nil)
	a.stop()
	return time.Since(a.start), missed, cut
}

// waitShareLocked is the latest cut-off the callers waiting for a refill
// allow an attempt started at now (see shareEnd): false when none waits
// or one waits without a deadline (it waits as long as CallTimeout
// allows). Call with mu held.
func (c *Client) waitShareLocked(now time.Time) (time.Time, bool) {
	if c.waiters == 0 || len(c.waitDeadlines) < c.waiters {
		return time.Time{}, false
	}
	var end time.Time
	for i, d := range c.waitDeadlines {
		if s := shareEnd(now, d); i == 0 || s.After(end) {
			end = s
		}
	}
	return end, true
}

// cutAttemptsLocked moves the cut-off of every refill attempt in flight
// that another endpoint follows to t at the latest, but not before it ran
// minAttempt. Call with mu held.
func (c *Client) cutAttemptsLocked(t time.Time) {
	for a := range c.attempts {
		if a.last {
			continue
		}
		at := latest(t, a.start.Add(minAttempt))
		if !at.Before(a.cutAt) {
			continue
		}
		a.cutAt = at
		if a.timer == nil {
			cancel := a.cancel
			a.timer = time.AfterFunc(time.Until(at), func() { cancel(errCut) })
		} else {
			a.timer.Reset(time.Until(at))
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// cutErr is the error of an attempt whose time ran out.
func cutErr(ran time.Duration, err error) error {
	return status.Errorf(codes.DeadlineExceeded, "no answer within %v: %v", ran.Round(time.Millisecond), err)
}

// rangeRetry is how long an endpoint that answered NextRange UNIMPLEMENTED
// is asked NextIDs instead before NextRange is tried again: a node
// upgraded in place keeps its address.
const rangeRetry = time.Minute

// fetched is a fetch's answer: runs that ep issued in the RPC that
// started at the monotonic reading start.
type fetched struct {
	runs  []Run
	ep    *endpoint
	start time.Duration
}

// fetch gets count IDs (fewer if an endpoint's bound is lower) from the
// first endpoint that serves them, trying each at most once. refill marks
// the refill goroutine's fetches, which waiting callers may cut short. On
// failure it returns ErrUnavailable wrapping the last endpoint's error, or
// the error of an endpoint that refused the request (NOT_FOUND,
// INVALID_ARGUMENT for a count of 1, ...), or ctx's error.
func (c *Client) fetch(ctx context.Context, count int, refill bool) (fetched, error) {
	c.awaitResolved(ctx)
	r, held := c.order(time.Duration(c.now()))
	defer r.end()
	if held != nil {
		return fetched{}, held
	}
	eps := r.eps
	var last error
	notFound := 0
	for i, ep := range eps {
		if i > 0 {
			c.stats.failovers.Add(1)
		}
		a := c.startAttempt(ctx, i == len(eps)-1, refill, !ep.answered.Load())
		runs, start, err := c.fetchFrom(a.ctx, ep, count, i == len(eps)-1)
		ran, missed, cut := c.endAttempt(a)
		if err == nil {
			ep.served()
			if prev := c.active.Swap(ep); prev != ep && prev != nil {
				c.log.Info("serving from endpoint", "endpoint", ep.addr, "was", prev.addr)
			}
			c.stats.fetches.Add(1)
			c.stats.fetchedIDs.Add(countOf(runs))
			return fetched{runs: runs, ep: ep, start: start}, nil
		}
		if c.closing() {
			return fetched{}, ErrClosed
		}
		c.stats.fetchErrors.Add(1)
		var stop bool
		if stop, last = c.failed(ctx, ep, err, ran, missed, cut, &notFound); stop {
			// The caller's deadline ended the round: its error, unless the
			// node answered with its reason, if only as the deadline
			// passed (the answer is there, and it says why).
			if err := callerDone(ctx); err != nil && Reason(last) == firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
				return fetched{}, err
			}
			return fetched{}, last
		}
	}
	if notFound > 0 && notFound == len(eps) {
		return fetched{}, last // no endpoint runs the generator
	}
	return fetched{}, c.roundFailed(len(eps), last)
}

// failed handles an attempt at ep that failed with err (see endAttempt
// for ran, missed and cut): it marks the endpoint down when the failure
// counts against it (countsAgainst), or as lacking the generator
// (NOT_FOUND), and returns whether the round ends here and the error to
// report (the caller's context ended, or the error does not fail over).
func (c *Client) failed(ctx context.Context, ep *endpoint, err error, ran time.Duration, missed, cut bool, notFound *int) (stop bool, last error) {
	if callerDone(ctx) != nil {
		// The caller gave up: that counts against the endpoint only if
		// it missed the deadline it was sent.
		if countsAgainst(err, missed) {
			c.markDown(ep, err, "no answer by the deadline sent")
		}
		return true, &EndpointError{Endpoint: ep.addr, Err: err}
	}
	if Reason(err) != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		// The node answered with its reason (a shed, a generator that
		// does not serve), if only as the deadline passed: that answer,
		// not the deadline, is what the caller is told.
		missed, cut = false, false
	}
	if cut || missed {
		err = cutErr(ran, err)
	}
	last = &EndpointError{Endpoint: ep.addr, Err: err}
	if status.Code(err) == codes.NotFound {
		*notFound++
		c.markLacking(ep, err)
		return false, last
	}
	if !failover(ctx, err) {
		return true, last
	}
	if countsAgainst(err, missed) {
		c.markDown(ep, err, "failing over")
	} else {
		c.log.Info("endpoint cut short for a waiting caller; trying the next", "endpoint", ep.addr, "after", ran.Round(time.Millisecond))
	}
	return false, last
}

// fetchFrom asks one endpoint for count IDs under an attempt's context,
// with NextRange, or with NextIDs while the endpoint does not know
// NextRange (an UNIMPLEMENTED answer switches at once, within the
// attempt). Before the first use of an endpoint it learns its bounds
// (Info) and, if the health watch has not spoken yet, checks its health
// once. An INVALID_ARGUMENT, or a RESOURCE_EXHAUSTED other than a node
// shedding load (a message too large), for a count above 1 halves the
// endpoint's bound for that RPC and retries. It returns the monotonic
// reading taken just before the RPC that succeeded was sent.
func (c *Client) fetchFrom(ctx context.Context, ep *endpoint, count int, last bool) ([]Run, time.Duration, error) {
	if c.opts.health && !ep.heard.Load() && !ep.noHealth.Load() {
		if err := c.check(ctx, ep); err != nil && (err != errNotServing || !last) {
			return nil, 0, err
		}
	}
	if ep.maxBatch.Load() == 0 {
		if err := c.learnBounds(ctx, ep); err != nil {
			return nil, 0, err
		}
	}
	for {
		mono := time.Duration(c.now())
		useRange := int64(mono) >= ep.noRangeUntil.Load()
		bound := &ep.maxRange
		if !useRange {
			// A NextIDs answer is 8 bytes an ID: the client's own bound
			// keeps it within the message size.
			bound = &ep.maxBatch
			count = min(count, c.opts.maxBatch)
		}
		if b := bound.Load(); b > 0 {
			count = int(min(int64(count), b))
		}
		var runs []Run
		var err error
		if useRange {
			runs, err = c.nextRange(ctx, ep, count)
			if status.Code(err) == codes.Unimplemented {
				ep.noRangeUntil.Store(int64(mono + rangeRetry))
				c.log.Info("endpoint does not know NextRange; asking NextIDs", "endpoint", ep.addr, "for", rangeRetry)
				continue
			}
		} else {
			runs, err = c.nextIDs(ctx, ep, count)
		}
		if err == nil {
			return runs, mono, nil
		}
		code := status.Code(err)
		tooLarge := code == codes.InvalidArgument ||
			(code == codes.ResourceExhausted && Reason(err) != firnv1.ErrorReason_OVERLOADED)
		if tooLarge && count > 1 {
			bound.Store(int64(count / 2))
			c.log.Warn("endpoint refused batch size; halving", "endpoint", ep.addr, "range", useRange, "count", count, "err", err)
			continue
		}
		return nil, 0, err
	}
}

// nextRange asks ep's NextRange for count IDs. Runs beyond count are cut
// off (a node gives exactly count); a run that wraps past the largest ID,
// or runs out of order, are a node's fault (INTERNAL).
func (c *Client) nextRange(ctx context.Context, ep *endpoint, count int) ([]Run, error) {
	resp, err := ep.ids.NextRange(ctx, &firnv1.NextRangeRequest{Generator: c.opts.generator, Count: uint64(count)})
	if err != nil {
		return nil, err
	}
	runs := make([]Run, 0, len(resp.GetRuns()))
	left := uint64(count)
	for _, r := range resp.GetRuns() {
		n := min(r.GetCount(), left)
		if n == 0 {
			continue
		}
		first := r.GetFirst()
		if first+(n-1) < first {
			return nil, status.Errorf(codes.Internal, "NextRange answered a run of %d from %d, past the largest ID", n, first)
		}
		if k := len(runs) - 1; k >= 0 && first <= runs[k].First+(runs[k].Count-1) {
			return nil, status.Errorf(codes.Internal, "NextRange answered runs out of order (%d after %d)", first, runs[k].First)
		}
		runs = append(runs, Run{First: first, Count: n})
		if left -= n; left == 0 {
			break
		}
	}
	if len(runs) == 0 {
		return nil, status.Error(codes.Internal, "NextRange answered no IDs")
	}
	return runs, nil
}

// nextIDs asks ep's NextIDs for count IDs, as runs.
func (c *Client) nextIDs(ctx context.Context, ep *endpoint, count int) ([]Run, error) {
	resp, err := ep.ids.NextIDs(ctx, &firnv1.NextIDsRequest{Generator: c.opts.generator, Count: uint32(count)})
	if err != nil {
		return nil, err
	}
	if len(resp.GetIds()) == 0 {
		return nil, status.Error(codes.Internal, "NextIDs answered no IDs")
	}
	return runsOf(resp.GetIds()), nil
}

// check asks ep's health service once; NOT_SERVING is errNotServing,
// which moves the attempt to the next endpoint. At the round's last
// endpoint fetchFrom sends the request all the same: the node refuses it
// at once with its reason (CLOCK_ROLLBACK, LEASE_LOST, …), which the
// caller must see, where the health answer says only that it does not
// serve.
func (c *Client) check(ctx context.Context, ep *endpoint) error {
	resp, err := ep.health.Check(ctx, &healthpb.HealthCheckRequest{Service: c.service()})
	switch {
	case status.Code(err) == codes.Unimplemented:
		ep.noHealth.Store(true) // no health service: not asked again
		return nil
	case status.Code(err) == codes.NotFound:
		return nil // it does not know the name (yet)
	case err != nil:
		return err
	}
	s := healthStatus(resp.GetStatus())
	if !ep.heard.Load() {
		c.setHealth(ep, s)
	}
	if s == healthNotServing {
		return errNotServing
	}
	return nil
}

// callerDone is the caller's context's error, or DeadlineExceeded once
// its deadline has passed though the context's timer has not fired yet:
// an attempt that ran to the caller's own deadline and missed it is the
// caller's deadline running out, not an endpoint failing.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// errNotServing is a health Check's NOT_SERVING, treated as UNAVAILABLE.
var errNotServing = status.Error(codes.Unavailable, "health check: NOT_SERVING")

// learnBounds reads the endpoint's bounds for the generator from Info
// (maxRange first: see endpoint); an endpoint without Info leaves them
// unknown. A failure that says nothing about Info (UNAVAILABLE, the
// attempt's time ran out) is returned.
func (c *Client) learnBounds(ctx context.Context, ep *endpoint) error {
	info, err := ep.ids.Info(ctx, &firnv1.InfoRequest{})
	if err != nil {
		if ctx.Err() != nil || failover(ctx, err) {
			return err
		}
		ep.maxRange.CompareAndSwap(0, -1)
		ep.maxBatch.CompareAndSwap(0, -1)
		return nil
	}
	mr, mb := int64(-1), int64(-1)
	for _, g := range info.GetGenerators() {
		if (c.opts.generator == "" && g.GetIsDefault()) || (c.opts.generator != "" && g.GetName() == c.opts.generator) {
			if g.GetMaxRange() > 0 {
				mr = int64(min(g.GetMaxRange(), math.MaxInt64))
			}
			if g.GetMaxBatch() > 0 {
				mb = int64(g.GetMaxBatch())
			}
			break
		}
	}
	ep.maxRange.CompareAndSwap(0, mr)
	ep.maxBatch.CompareAndSwap(0, mb)
	return nil
}

// each runs call against the endpoints in order until one answers without
// an error that fails over. Each call is an attempt as in fetch, and a
// failure counts against its endpoint the same way.
func (c *Client) each(ctx context.Context, call func(context.Context, *endpoint) error) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.awaitResolved(ctx)
	r, held := c.order(time.Duration(c.now()))
	defer r.end()
	if held != nil {
		return held
	}
	eps := r.eps
	var last error
	notFound := 0
	for i, ep := range eps {
		a := c.startAttempt(ctx, i == len(eps)-1, false, !ep.answered.Load())
		err := call(a.ctx, ep)
		ran, missed, cut := c.endAttempt(a)
		if err == nil {
			ep.served()
			return nil
		}
		if c.closing() {
			return ErrClosed
		}
		c.stats.callErrors.Add(1)
		var stop bool
		if stop, last = c.failed(ctx, ep, err, ran, missed, cut, &notFound); stop {
			return last
		}
	}
	if notFound > 0 && notFound == len(eps) {
		return last
	}
	return c.roundFailed(len(eps), last)
}

// lackingFor is how long an endpoint that answered NOT_FOUND (it does not
// run the client's generator: a rollout adding one may not have reached
// it) is put behind the others. It is still tried when they fail.
const lackingFor = 30 * time.Second

// markLacking puts ep, which does not run the generator, behind the
// other endpoints for lackingFor.
func (c *Client) markLacking(ep *endpoint, err error) {
	_, mono := c.clock.Now()
	ep.downUntil.Store(int64(mono + lackingFor))
	c.log.Warn("endpoint does not run the generator; trying the others", "endpoint", ep.addr, "generator", c.opts.generator, "err", err)
}

// roundFailed is the error of a round in which no endpoint served; it asks
// for the DNS names to be resolved again.
func (c *Client) roundFailed(tried int, last error) error {
	c.askResolve()
	if tried == 0 {
		return fmt.Errorf("%w: no endpoint: the DNS names given resolved to no address yet", ErrUnavailable)
	}
	return fmt.Errorf("%w (%d endpoints tried): %w", ErrUnavailable, tried, last)
}

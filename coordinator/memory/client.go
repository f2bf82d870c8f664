package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

var (
	errClosed      = errors.New("client closed")
	errRefused     = errors.New("connection refused (injected)")
	errReplyLost   = errors.New("the reply was lost (injected): the write may have been applied")
	errSessionGone = errors.New("session not found")
	// errFence: a holder write found the owner record gone or another's.
	errFence = errors.New("fence failed")
)

// clientIDs orders clients by creation, for a fixed delivery order.
var clientIDs atomic.Int64

// Client is one connection to a Store, shaped like the etcd backend's
// Coordinator: its leases share one session (granted on first use and
// again after it is lost) that it keeps alive by renewing it every TTL/5.
// It implements coordinator.Coordinator and coordinator.Admin.
type Client struct {
	s      *Store
	id     int64
	clock  clockguard.Clock
	faults Faults
	log    *slog.Logger

	grant chan struct{} // one session grant at a time (a channel: durably blocking under synctest)
	stop  chan struct{} // closed by Close and Kill

	mu     sync.Mutex // never held across a wait, nor while taking s.mu
	sess   *session
	held   map[heldKey]*lease
	ended  coordinator.EndedSlots // slots of leases whose session ended
	closed bool
	thaw   chan struct{} // non-nil while frozen; closed by Thaw
	// afterTake, when set (tests only), runs in Acquire after the take
	// and before the lease is tracked.
	afterTake func()
	wg        sync.WaitGroup

	pmu      sync.Mutex // the heartbeats seen (lock order: s.mu, then pmu)
	frozen   bool
	watching bool
	resync   bool
	beats    map[string]coordinator.PeerBeat
	pending  []peerEvent // delivered while frozen
}

var _ coordinator.Backend = (*Client)(nil)

// session is one session of a client, like one etcd lease.
type session struct {
	id   int64
	done chan struct{} // closed when the client gives the session up
	once sync.Once
	// base is read before the grant was sent; sent is when the last
	// acknowledged renewal (or the grant) was sent, as nanoseconds after
	// base: the store keeps the session at least its TTL after it, unless
	// told otherwise (Expire, Restore).
	base time.Time
	sent atomic.Int64
	ttl  time.Duration
	// lapsedAt: when (after base) a TTL was last found passed with no
	// renewal acknowledged; 0: never.
	lapsedAt atomic.Int64
}

// assured is how long the store keeps s at least, from now, for a lease
// taken at since. Once it has run out (or a renewal was sent a TTL after
// the last acknowledged one) it stays 0 for every lease taken before: a
// restore revives sessions.
func (s *session) assured(since time.Time) time.Duration {
	if s.isDone() {
		return 0
	}
	if at := s.lapsedAt.Load(); at != 0 && !since.After(s.base.Add(time.Duration(at))) {
		return 0
	}
	a := time.Until(s.base.Add(time.Duration(s.sent.Load()) + s.ttl))
	if a <= 0 {
		s.lapse()
		return 0
	}
	return a
}

// lapse records that the session's assurance ran out now.
func (s *session) lapse() { s.lapsedAt.Store(int64(max(time.Since(s.base), 1))) }

func (s *session) end() { s.once.Do(func() { close(s.done) }) }

func (s *session) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// heldKey names one acquisition: an owner record of generator's slot
// created at revision token.
type heldKey struct {
	generator string
	slot      coordinator.Slot
	token     int64
}

func newClient(s *Store, clock clockguard.Clock) *Client {
	id := clientIDs.Add(1)
	return &Client{s: s, id: id, clock: clock, log: s.log.With("client", id),
		grant: make(chan struct{}, 1), stop: make(chan struct{}), held: map[heldKey]*lease{}}
}

// Faults are the faults this client's operations suffer (on top of the
// store's).
func (c *Client) Faults() *Faults { return &c.faults }

func unavailable(what string, err error) error {
	return fmt.Errorf("%w: memory %s: %w", coordinator.ErrUnavailable, what, err)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// gate waits while the client is frozen; false once it is closed.
func (c *Client) gate() bool {
	for {
		c.mu.Lock()
		ch := c.thaw
		c.mu.Unlock()
		if ch == nil {
			select {
			case <-c.stop:
				return false
			default:
				return true
			}
		}
		select {
		case <-ch:
		case <-c.stop:
			return false
		}
	}
}

// sleep waits d, or until ctx ends or the client stops.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop:
		return errClosed
	}
}

// availability is the worse of the store's and the client's for op, and
// their latencies added up.
func (c *Client) availability(op Op) (time.Duration, Availability) {
	l1, a1 := c.s.faults.get(op)
	l2, a2 := c.faults.get(op)
	return l1 + l2, max(a1, a2)
}

// lost consumes one lost reply of op (the client's first), reporting
// whether there was one.
func (c *Client) lost(op Op) bool { return c.faults.take(op) || c.s.faults.take(op) }

// call runs one operation: the freeze gate, the injected latency and
// availability, then apply under the store's lock (sessions whose TTL ran
// out are ended first), then the freeze gate again (a frozen client gets
// no reply, though the operation was applied).
func (c *Client) call(ctx context.Context, op Op, what string, apply func(now time.Time) error) error {
	if !c.gate() || c.isClosed() {
		return unavailable(what, errClosed)
	}
	lat, avail := c.availability(op)
	if lat > 0 {
		if err := c.sleep(ctx, lat); err != nil {
			return unavailable(what, err)
		}
	}
	switch avail {
	case Refusing:
		return unavailable(what, errRefused)
	case Hanging:
		err := c.sleep(ctx, c.s.cfg.Timeout)
		if err == nil {
			err = fmt.Errorf("no answer within %v (injected)", c.s.cfg.Timeout)
		}
		return unavailable(what, err)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(what, err)
	}
	c.s.mu.Lock()
	now := time.Now()
	c.s.reapLocked(now)
	err := apply(now)
	c.s.mu.Unlock()
	if !c.gate() {
		return unavailable(what, errClosed)
	}
	return err
}

// --- sessions ------------------------------------------------------------

// session returns the live session, granting one if there is none.
func (c *Client) session(ctx context.Context) (*session, error) {
	select {
	case c.grant <- struct{}{}:
	case <-ctx.Done():
		return nil, unavailable("grant", ctx.Err())
	case <-c.stop:
		return nil, unavailable("grant", errClosed)
	}
	defer func() { <-c.grant }()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, unavailable("grant", errClosed)
	}
	if s := c.sess; s != nil && !s.isDone() {
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	var id int64
	base := time.Now()
	err := c.call(ctx, OpAcquire, "grant", func(now time.Time) error {
		c.s.nextSession++
		id = c.s.nextSession
		c.s.st.sessions[id] = now.Add(c.s.cfg.TTL)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s := &session{id: id, done: make(chan struct{}), base: base, ttl: c.s.cfg.TTL}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, unavailable("grant", errClosed) // the session runs out by itself
	}
	c.sess = s
	c.wg.Add(1)
	c.mu.Unlock()
	go c.keepAlive(s)
	c.log.Info("session granted", "session", id, "ttl", c.s.cfg.TTL)
	return s, nil
}

// keepAlive renews s every TTL/5, each renewal bounded by min(Timeout,
// TTL/10) and retried after a short pause when it fails. The session is
// given up (its leases end) when a renewal finds the store no longer knows
// it, or at the first failed renewal once a TTL has passed since the last
// acknowledged one was sent: the store may have ended it by then.
func (c *Client) keepAlive(s *session) {
	defer c.wg.Done()
	ttl := c.s.cfg.TTL
	interval := ttl / 5
	attempt := min(c.s.cfg.Timeout, interval/2)
	pause := max(interval/10, time.Millisecond)
	lastSent := s.base
	wait := interval
	for {
		t := time.NewTimer(wait)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-s.done:
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), attempt)
		err := c.call(ctx, OpRenew, "renew", func(now time.Time) error {
			if _, ok := c.s.st.sessions[s.id]; !ok {
				return errSessionGone
			}
			c.s.st.sessions[s.id] = now.Add(ttl)
			return nil
		})
		cancel()
		switch {
		case err == nil:
			if sent.Sub(lastSent) >= ttl {
				// Sent a TTL after the last acknowledged one (a freeze):
				// the session may have ended in between and a restore
				// revived it; leases taken before are no longer assured.
				s.lapse()
			}
			lastSent, wait = sent, interval
			s.sent.Store(int64(sent.Sub(s.base)))
			continue
		case errors.Is(err, errSessionGone):
			c.sessionLost(s, "session not found")
			return
		case errors.Is(err, errClosed):
			return
		}
		if time.Since(lastSent) >= ttl {
			c.sessionLost(s, fmt.Sprintf("no renewal acknowledged for %v: %v", ttl, err))
			return
		}
		wait = pause
	}
}

// sessionLost gives s up: every lease bound to it ends.
func (c *Client) sessionLost(s *session, why string) {
	s.end()
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	var ls []*lease
	for _, l := range c.held {
		if l.sess == s {
			ls = append(ls, l)
			if !l.IsDone() {
				c.ended.Add(l.Spec().Generator, l.Slot(), l.guardSession)
			}
		}
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.Finish("session ended: " + why)
	}
	c.log.Info("session given up", "session", s.id, "reason", why)
}

// register tracks a new lease, its slot no longer one of an ended session
// to take again. A lease whose session the client gave up meanwhile ends
// at once, its slot remembered as sessionLost would have: sessionLost
// ends the session before it looks for its leases, so either it finds
// this one or the check here finds the session ended.
func (c *Client) register(l *lease) {
	c.mu.Lock()
	c.ended.Forget(l.Spec().Generator, l.Slot())
	c.held[heldKey{l.Spec().Generator, l.Slot(), l.token}] = l
	c.mu.Unlock()
	if l.sess.isDone() {
		c.ended.Add(l.Spec().Generator, l.Slot(), l.guardSession)
		l.Finish("session ended during acquisition")
	}
}

func (c *Client) unregister(l *lease) {
	c.mu.Lock()
	k := heldKey{l.Spec().Generator, l.Slot(), l.token}
	if c.held[k] == l {
		delete(c.held, k)
	}
	c.mu.Unlock()
}

func (c *Client) holds(generator string, slot coordinator.Slot, token int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[heldKey{generator, slot, token}]
	return ok
}

func (c *Client) finishAll(why string) {
	c.mu.Lock()
	ls := make([]*lease, 0, len(c.held))
	for _, l := range c.held {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.Finish(why)
	}
}

// Close ends the client: its session is revoked at once when the store
// answers renewals (the owner records go with it; reservations stay), its
// renewals stop and its leases end. Closing twice is harmless.
func (c *Client) Close() error { return c.shut(true, "coordinator closed") }

// Kill stops the client abruptly, as a crashed process: no revoke, no
// release, no more renewals; its owner records linger until the TTL runs
// out. Its leases end (the process holding them is gone) and every later
// call fails with coordinator.ErrUnavailable.
func (c *Client) Kill() { _ = c.shut(false, "coordinator killed") }

func (c *Client) shut(revoke bool, why string) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.sess
	c.sess = nil
	close(c.stop)
	c.mu.Unlock()
	if s != nil {
		if _, a := c.availability(OpRenew); revoke && a == Available {
			c.s.mu.Lock()
			c.s.endSessionLocked(s.id, "revoked")
			c.s.mu.Unlock()
		}
		s.end()
	}
	c.wg.Wait()
	c.finishAll(why)
	c.s.forget(c)
	c.pmu.Lock()
	c.watching, c.beats, c.pending = false, nil, nil
	c.pmu.Unlock()
	return nil
}

// Freeze stops the client as SIGSTOP stops a process: from now on none of
// its calls returns and none of its renewals is sent, and heartbeats sent
// to it wait, until Thaw. A call already applied gets its reply only after
// Thaw.
func (c *Client) Freeze() {
	c.mu.Lock()
	if c.thaw == nil {
		c.thaw = make(chan struct{})
	}
	c.mu.Unlock()
	c.pmu.Lock()
	c.frozen = true
	c.pmu.Unlock()
}

// Thaw resumes a frozen client where it stopped (as SIGCONT does): its
// waiting calls and renewals go on, and the heartbeats sent to it
// meanwhile are received now.
func (c *Client) Thaw() {
	c.mu.Lock()
	ch := c.thaw
	c.thaw = nil
	c.mu.Unlock()
	c.pmu.Lock()
	c.frozen = false
	pending := c.pending
	c.pending = nil
	for _, ev := range pending {
		c.receiveLocked(ev)
	}
	c.pmu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// Expire ends the client's session on the store now, as a TTL expiry
// would: its owner records are deleted at once, and the client learns so
// at its next renewal (within TTL/5), when its leases end. It reports
// whether there was a live session to end.
func (c *Client) Expire() bool {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return false
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, ok := c.s.st.sessions[s.id]
	c.s.endSessionLocked(s.id, "expired (injected)")
	return ok
}

// Session is the ID of the client's live session (0: none).
func (c *Client) Session() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil || c.sess.isDone() {
		return 0
	}
	return c.sess.id
}

// --- acquisition ---------------------------------------------------------

// Acquire implements coordinator.Coordinator. One step under the store's
// lock creates the pin when absent, deletes this client's stray owner
// records (an acquisition whose reply was lost), scans the generator,
// asks coordinator.Plan and takes its first candidate: the take is atomic,
// so the first candidate is always taken. A failure matching
// coordinator.ErrUnavailable is retried with backoff
// (coordinator.RetryAcquire, as every backend does), until ctx ends.
func (c *Client) Acquire(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if node.InstanceID == "" || node.Name == "" {
		return nil, fmt.Errorf("%w: NodeInfo needs a Name and an InstanceID (name %q, instance %q)",
			coordinator.ErrInvalidSpec, node.Name, node.InstanceID)
	}
	return coordinator.RetryAcquire(ctx, "memory",
		func(ctx context.Context) (coordinator.Lease, error) { return c.acquireOnce(ctx, spec, node) },
		func(error) bool { return c.isClosed() }, c.sleep)
}

func (c *Client) acquireOnce(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	sess, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	var l *lease
	err = c.call(ctx, OpAcquire, "acquire", func(time.Time) error {
		st := c.s.st
		if _, ok := st.sessions[sess.id]; !ok {
			return errSessionGone
		}
		g := st.gen(spec.Generator, true)
		if g.marker == nil && g.pin == nil {
			st.rev++
			g.pin = c.s.newPin(spec)
			c.log.Info("generator pinned", "generator", spec.Generator, "layout", spec.Layout,
				"datacenter", spec.Datacenter, "incarnation", g.pin.Incarnation)
		}
		wall, _ := c.clock.Now()
		c.dropStraysLocked(spec.Generator, g, sess.id, node)
		sc := g.scan()
		var waiting []coordinator.Slot
		if g.marker == nil {
			sc.Retake, waiting = c.ended.Sort(spec, func(slot coordinator.Slot) coordinator.EndedOwner {
				o, owned := g.owners[slot]
				return coordinator.EndedOwner{Owned: owned, Session: o.session}
			})
		}
		cands, err := coordinator.Plan(spec, node, sc, wall)
		if err != nil {
			return err
		}
		if len(waiting) > 0 && cands[0].Kind == coordinator.Free {
			// As on etcd and ZooKeeper: the comparison a restore shows
			// in is made on the worker the node acknowledged.
			return unavailable("acquire", coordinator.WaitingErr(waiting[0]))
		}
		l = c.takeLocked(spec, g, sess, cands[0], coordinator.Heartbeat{Node: node, Wall: wall})
		if c.afterTake != nil {
			c.afterTake()
		}
		if c.lost(OpAcquire) {
			return unavailable("acquire", errReplyLost) // taken, but no lease knows it: a stray
		}
		c.register(l)
		return nil
	})
	if errors.Is(err, errSessionGone) {
		c.sessionLost(sess, "session not found")
		return nil, unavailable("acquire", err)
	}
	if err != nil {
		return nil, err
	}
	c.log.Info("worker acquired", "generator", spec.Generator, "slot", l.Slot().String(),
		"reserved", l.ReadReserved(), "floor", l.Floor(), "token", l.token)
	return l, nil
}

// takeLocked takes one candidate: a new owner record bound to sess,
// created at a new revision (its ownership token), read together with the
// slot's reservation; the cursor raised past a free slot. A take-back
// deletes the stale record first, so the old holder's fence fails.
func (c *Client) takeLocked(spec coordinator.Spec, g *genState, sess *session, cand coordinator.Candidate, hb coordinator.Heartbeat) *lease {
	st := c.s.st
	st.rev++
	token, guard := st.rev, sess.id
	if cand.Kind == coordinator.TakeBack {
		old := g.owners[cand.Slot]
		if weakTakeBack {
			// firn_weakfence: a write over the old record, keeping its
			// token and session (what the strong fence exists to prevent).
			token, guard = old.token, old.session
		} else {
			c.s.deleteOwnerLocked(spec.Generator, g, cand.Slot)
		}
		c.log.Info("took back own stale worker", "generator", spec.Generator, "slot", cand.Slot.String(), "old_token", old.token)
	}
	c.s.putOwnerLocked(spec.Generator, g, cand.Slot, owner{rec: record(hb), token: token, session: guard})
	if cand.Kind == coordinator.Free {
		g.cursor = max(g.cursor, cand.Pos+1)
	}
	return newLease(c, spec, cand.Slot, sess, guard, token, g.reservedOf(cand.Slot), g.floor, g.pin.Incarnation)
}

// dropStraysLocked deletes the owner records of generator bound to this
// client's session sess and carrying node's instance ID that no lease of
// this client holds: an acquisition whose reply was lost took them.
func (c *Client) dropStraysLocked(generator string, g *genState, sess int64, node coordinator.NodeInfo) {
	for _, slot := range slots(g.owners) {
		o := g.owners[slot]
		if o.session != sess || o.rec.Instance != node.InstanceID || c.holds(generator, slot, o.token) {
			continue
		}
		c.s.st.rev++
		c.s.deleteOwnerLocked(generator, g, slot)
		c.log.Warn("deleted an owner record of this client that no lease holds (an acquisition whose reply was lost)",
			"generator", generator, "slot", slot.String(), "token", o.token)
	}
}

func record(hb coordinator.Heartbeat) coordinator.OwnerRecord {
	return coordinator.OwnerRecord{Name: hb.Node.Name, Instance: hb.Node.InstanceID, Address: hb.Node.Address,
		StartTime: hb.Node.StartTime, Wall: hb.Wall}
}

// --- restore markers and admin -------------------------------------------

func validName(s string) bool { return s != "" && len(s) <= 128 && !strings.ContainsAny(s, "/\x00") }

// MarkRestored implements coordinator.Coordinator: the marker is written
// when none stands, and replaces a standing one only with evidence it
// does not cover (Covers: a higher acknowledged value).
func (c *Client) MarkRestored(ctx context.Context, ev coordinator.RestoreEvidence) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	return c.call(ctx, OpMark, "mark restored", func(time.Time) error {
		g := c.s.st.gen(ev.Generator, true)
		if g.marker != nil && g.marker.Covers(ev) {
			return nil
		}
		c.s.st.rev++
		e := ev
		g.marker = &e
		c.log.Error("restore marker written: no node acquires for this generator until a bump clears it",
			"generator", ev.Generator, "slot", ev.Slot.String(), "acked", ev.Acked, "shown", ev.Shown, "gap", ev.Gap())
		return nil
	})
}

// Workers implements coordinator.Admin: every slot of the generator with
// an owner or a reservation, in slot order.
func (c *Client) Workers(ctx context.Context, generator string) ([]coordinator.SlotState, error) {
	if !validName(generator) {
		return nil, fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, generator)
	}
	var out []coordinator.SlotState
	err := c.call(ctx, OpAdmin, "workers", func(time.Time) error {
		out = c.s.st.holders(generator)
		return nil
	})
	return out, err
}

// ForceRelease implements coordinator.Admin: the slot's owner record is
// deleted, its reservation kept; coordinator.ErrNotHeld when it has none.
func (c *Client) ForceRelease(ctx context.Context, generator string, slot coordinator.Slot) error {
	if !validName(generator) {
		return fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, generator)
	}
	return c.call(ctx, OpAdmin, "force release", func(time.Time) error {
		g := c.s.st.gen(generator, false)
		if g == nil {
			return fmt.Errorf("%w: generator %q %s", coordinator.ErrNotHeld, generator, slot)
		}
		o, ok := g.owners[slot]
		if !ok {
			return fmt.Errorf("%w: generator %q %s", coordinator.ErrNotHeld, generator, slot)
		}
		c.s.st.rev++
		c.s.deleteOwnerLocked(generator, g, slot)
		c.log.Warn("worker force-released", "generator", generator, "slot", slot.String(), "token", o.token, "holder", o.rec.Name)
		return nil
	})
}

// Bump implements coordinator.Admin in one atomic step: a By below a
// standing marker's gap, a floor past b.MaxTime and reservations beyond
// b.Now + b.MaxAhead (b.CheckAhead) are refused before anything is
// written; then the generator floor is raised (never lowered), every
// reservation raised by b.By, and the marker cleared.
func (c *Client) Bump(ctx context.Context, b coordinator.BumpSpec) (coordinator.BumpResult, error) {
	if err := b.Validate(); err != nil {
		return coordinator.BumpResult{}, err
	}
	var out coordinator.BumpResult
	err := c.call(ctx, OpAdmin, "bump", func(time.Time) error {
		top, floor := int64(-1), int64(-1)
		var marker *coordinator.RestoreEvidence
		if g := c.s.st.gen(b.Generator, false); g != nil {
			for _, r := range g.reserved {
				top = max(top, r)
			}
			marker, floor = g.marker, g.floor
		}
		if err := b.CheckAhead(c.s.st.holders(b.Generator), floor); err != nil {
			return err
		}
		want, err := b.BumpFloor(top, marker)
		if err != nil {
			return err
		}
		g := c.s.st.gen(b.Generator, true)
		c.s.st.rev++
		g.floor = max(g.floor, want)
		for slot := range g.reserved {
			g.reserved[slot] += b.By
		}
		out.Floor = g.floor
		if marker != nil {
			g.marker = nil
			out.Cleared = marker
		}
		c.log.Warn("generator bumped", "generator", b.Generator, "by", b.By, "floor", g.floor, "cleared", marker != nil)
		return nil
	})
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	return out, nil
}

// Generators implements coordinator.Admin: every generator with a pin, a
// floor or a restore marker, sorted by name.
func (c *Client) Generators(ctx context.Context) ([]coordinator.GeneratorState, error) {
	var out []coordinator.GeneratorState
	err := c.call(ctx, OpAdmin, "generators", func(time.Time) error {
		for _, name := range sortedKeys(c.s.st.gens) {
			g := c.s.st.gens[name]
			if g.pin == nil && g.floor < 0 && g.marker == nil {
				continue
			}
			gs := coordinator.GeneratorState{Name: name, Floor: g.floor}
			if g.pin != nil {
				gs.Pin = *g.pin
			}
			if g.marker != nil {
				m := *g.marker
				gs.Restore = &m
			}
			out = append(out, gs)
		}
		return nil
	})
	return out, err
}

// --- definitions -----------------------------------------------------------

// defWhere names where a definition is stored, for errors.
func defWhere(name string) string { return "memory:" + name + "/definition" }

// CreateDefinition implements coordinator.Definitions: stored when the
// name has none, in one step.
func (c *Client) CreateDefinition(ctx context.Context, d coordinator.GeneratorDefinition) error {
	if err := d.Validate(); err != nil {
		return err
	}
	return c.call(ctx, OpAdmin, "create definition", func(time.Time) error {
		if rec, ok := c.s.st.defs[d.Name]; ok {
			old, err := coordinator.DecodeDefinition(d.Name, defWhere(d.Name), rec)
			if err != nil {
				return err
			}
			return &coordinator.DefinitionExistsError{Existing: old}
		}
		c.s.st.rev++
		c.s.st.defs[d.Name] = coordinator.EncodeDefinition(d)
		c.log.Info("generator defined", "generator", d.Name, "definition", d.Definition)
		return nil
	})
}

// RetireDefinition implements coordinator.Definitions.
func (c *Client) RetireDefinition(ctx context.Context, name, why string, at time.Time) (coordinator.GeneratorDefinition, error) {
	if !validName(name) {
		return coordinator.GeneratorDefinition{}, fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, name)
	}
	var out coordinator.GeneratorDefinition
	err := c.call(ctx, OpAdmin, "retire definition", func(time.Time) error {
		rec, ok := c.s.st.defs[name]
		if !ok {
			return fmt.Errorf("%w: generator %q", coordinator.ErrNoDefinition, name)
		}
		d, err := coordinator.DecodeDefinition(name, defWhere(name), rec)
		if err != nil {
			return err
		}
		var changed bool
		if out, changed = d.Retire(why, at); changed {
			c.s.st.rev++
			c.s.st.defs[name] = coordinator.EncodeDefinition(out)
			c.log.Warn("generator retired", "generator", name, "reason", why)
		}
		return nil
	})
	return out, err
}

// Definitions implements coordinator.Definitions: a record that does not
// decode is named in the *coordinator.UnreadableDefinitionsError beside
// the others.
func (c *Client) Definitions(ctx context.Context) ([]coordinator.GeneratorDefinition, error) {
	var out []coordinator.GeneratorDefinition
	var bad []coordinator.UnreadableDefinition
	err := c.call(ctx, OpAdmin, "definitions", func(time.Time) error {
		out, bad = nil, nil
		for _, name := range sortedKeys(c.s.st.defs) {
			d, err := coordinator.DecodeDefinition(name, defWhere(name), c.s.st.defs[name])
			if err != nil {
				bad = append(bad, coordinator.UnreadableDefinition{Name: name, Where: defWhere(name), Err: err})
				continue
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return coordinator.UnreadableDefinitions(out, bad)
}

// --- peers ---------------------------------------------------------------

// peerEvent is an owner record written (rec) or deleted (nil).
type peerEvent struct {
	generator string
	slot      coordinator.Slot
	rec       *coordinator.OwnerRecord
}

func (ev peerEvent) key() string { return ev.generator + "/" + ev.slot.String() }

// deliver receives one owner record change, as etcd's watch delivers it:
// received now on the client's clock; kept until Thaw while frozen; missed
// while the client cannot reach the store (its next Peers reads all again).
// Called under the store's lock.
func (c *Client) deliver(ev peerEvent) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	switch {
	case !c.watching:
	case c.frozen:
		c.pending = append(c.pending, ev)
	default:
		if _, a := c.availability(OpPeers); a != Available {
			c.resync = true
			return
		}
		c.receiveLocked(ev)
	}
}

func (c *Client) receiveLocked(ev peerEvent) {
	if !c.watching || c.resync {
		return
	}
	if ev.rec == nil {
		delete(c.beats, ev.key())
		return
	}
	wall, _ := c.clock.Now()
	c.beats[ev.key()] = coordinator.PeerBeat{Generator: ev.generator, Slot: ev.slot, Heartbeat: ev.rec.Heartbeat(), Received: wall}
}

// restored is called under the store's lock when the store is restored:
// the heartbeats seen are read again at the next Peers.
func (c *Client) restored() {
	c.pmu.Lock()
	if c.watching {
		c.resync = true
		c.pending = nil
	}
	c.pmu.Unlock()
}

// Peers implements coordinator.Coordinator, as the etcd backend does: the
// first call reads every live holder's heartbeat (received now, on this
// client's clock) and from then on the client is sent each heartbeat as it
// is written, received at that moment. While it cannot reach the store it
// answers at once from what it had; the first call after it can again
// reads all again.
func (c *Client) Peers(ctx context.Context) ([]coordinator.PeerBeat, error) {
	c.pmu.Lock()
	watching, resync := c.watching, c.resync
	c.pmu.Unlock()
	_, avail := c.availability(OpPeers)
	if !watching || (resync && avail == Available) {
		err := c.call(ctx, OpPeers, "peers", func(time.Time) error {
			c.pmu.Lock()
			defer c.pmu.Unlock()
			wall, _ := c.clock.Now()
			c.beats = map[string]coordinator.PeerBeat{}
			for _, name := range sortedKeys(c.s.st.gens) {
				for slot, o := range c.s.st.gens[name].owners {
					ev := peerEvent{generator: name, slot: slot}
					c.beats[ev.key()] = coordinator.PeerBeat{Generator: name, Slot: slot, Heartbeat: o.rec.Heartbeat(), Received: wall}
				}
			}
			c.watching, c.resync, c.pending = true, false, nil
			return nil
		})
		if err != nil && (!watching || c.isClosed()) {
			return nil, err
		}
	} else if !c.gate() || c.isClosed() {
		return nil, unavailable("peers", errClosed)
	}
	c.pmu.Lock()
	out := make([]coordinator.PeerBeat, 0, len(c.beats))
	for _, b := range c.beats {
		out = append(out, b)
	}
	c.pmu.Unlock()
	sortBeats(out)
	return out, nil
}

func sortBeats(out []coordinator.PeerBeat) {
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Generator != b.Generator {
			return a.Generator < b.Generator
		}
		return a.Slot.Datacenter < b.Slot.Datacenter || (a.Slot.Datacenter == b.Slot.Datacenter && a.Slot.Worker < b.Slot.Worker)
	})
}

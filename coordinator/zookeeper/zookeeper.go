package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// Coordinator is the ZooKeeper backend. All its leases share one session;
// ownership of each slot is an ephemeral owner node of that session, and
// every write a holder makes is fenced on the exact versions it last wrote.
type Coordinator struct {
	cfg    Config
	clock  clockguard.Clock
	log    *slog.Logger
	acl    []zk.ACL
	root   string // <prefix>/<cluster>
	dialer Dialer

	// conn is the current client. It is replaced (see redial) when the
	// servers keep closing its connections without answering its connect
	// request; every call reads it anew.
	conn atomic.Pointer[zk.Conn]

	// sid is the session the server last confirmed (0 before the first,
	// after an expiry and while a new client is being set up); negotiated
	// its timeout.
	sid        atomic.Int64
	negotiated atomic.Int64

	// handshake is closed at the next handshake answer of the current
	// client (see nextHandshake) and then replaced.
	hsMu      sync.Mutex
	handshake chan struct{}

	// okSid and okSent: the session of the latest request sent that the
	// server answered, and when it was sent. The server keeps that
	// session at least its timeout after it (Assured).
	okMu      sync.Mutex
	okSid     int64
	okSent    time.Time
	lapsedSid int64     // a session whose assurance ran out, at lapsedAt:
	lapsedAt  time.Time // 0 for good for every lease taken before

	mu        sync.Mutex
	gate      *gate // the current client's dialer
	redialing bool  // a new client is being set up
	leases    map[*lease]struct{}
	closed    bool
	ensured   map[string]bool        // generator paths known to exist
	orphans   map[string][]byte      // see addOrphan
	ended     coordinator.EndedSlots // slots of leases whose session ended, see sessionEnded

	peersOnce sync.Once
	peers     *peerWatch

	// afterRead, when set (tests only, see export_test.go), runs in
	// Acquire after a candidate's reservation was read and before the
	// acquiring multi is sent.
	afterRead func(coordinator.Slot)
	// afterTake, when set (tests only), runs in Acquire after the
	// acquiring multi went through and before the lease is tracked.
	afterTake func(coordinator.Slot)
	// afterNoNode, when set (tests only), runs in Peers' watches after a
	// listing found path absent and before the watch for its creation
	// is set.
	afterNoNode func(path string)

	bg   context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

var _ coordinator.Backend = (*Coordinator)(nil)

// New connects to ZooKeeper, waits for a session, checks the negotiated
// session timeout against the reservation window, authenticates and makes
// sure the cluster's root node exists. It returns an error matching
// coordinator.ErrInvalidSpec for a bad configuration (the negotiated
// timeout included), or one matching coordinator.ErrUnavailable when no
// server gives a session within DialTimeout or the credentials are refused.
func New(cfg Config) (*Coordinator, error) { return NewContext(context.Background(), cfg) }

// NewContext is New, given up on (ErrUnavailable) when ctx ends before the
// connection is made: for a caller that dials in the background and must be
// able to stop (coordinator.NewLazy).
func NewContext(ctx context.Context, cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	bg, stop := context.WithCancel(context.Background())
	c := &Coordinator{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     log.With("coordinator", "zookeeper", "cluster", cfg.Cluster),
		acl:     cfg.acl(),
		root:    cfg.Prefix + "/" + cfg.Cluster,
		dialer:  cfg.Dialer,
		leases:  map[*lease]struct{}{},
		ensured: map[string]bool{},
		bg:      bg,
		stop:    stop,
	}
	if c.dialer == nil {
		c.dialer = net.DialTimeout
	}
	g, conn, err := c.connect()
	if err != nil {
		stop()
		return nil, fmt.Errorf("%w: zookeeper connect %v: %w", coordinator.ErrInvalidSpec, cfg.Servers, err)
	}
	c.gate = g
	c.conn.Store(conn)
	fail := func(err error) (*Coordinator, error) {
		c.Abandon()
		return nil, err
	}
	select {
	case <-g.session:
	case <-time.After(cfg.DialTimeout):
		return fail(fmt.Errorf("%w: zookeeper %v: no session within %v", coordinator.ErrUnavailable, cfg.Servers, cfg.DialTimeout))
	case <-ctx.Done():
		return fail(fmt.Errorf("%w: zookeeper %v: %w", coordinator.ErrUnavailable, cfg.Servers, ctx.Err()))
	}
	neg := time.Duration(c.negotiated.Load())
	if err := cfg.checkSession(neg, "negotiated"); err != nil {
		return fail(err)
	}
	if cfg.Auth != "" {
		if _, err := callOn(c, ctx, false, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(cfg.Auth))
		}); err != nil {
			return fail(fmt.Errorf("%w: zookeeper digest auth: %w", coordinator.ErrUnavailable, err))
		}
	}
	if err := c.ensurePath(ctx, c.root); err != nil {
		return fail(err)
	}
	c.log.Info("zookeeper session established", "session", fmt.Sprintf("%#x", c.sid.Load()),
		"timeout", neg, "servers", strings.Join(cfg.Servers, ","))
	if c.track() {
		go c.touch()
	}
	return c, nil
}

// touch sends a sync six times per session timeout while the
// coordinator holds a lease: the client's own pings keep the session
// alive but tell firn nothing, and Lease.Assured counts from the last
// request the leader answered (a follower answers a read from its own
// copy, also while cut off from the leader: see read).
func (c *Coordinator) touch() {
	defer c.wg.Done()
	for {
		every := max(c.SessionTimeout()/6, 100*time.Millisecond)
		select {
		case <-c.bg.Done():
			return
		case <-time.After(every):
		}
		c.mu.Lock()
		held := len(c.leases) > 0
		c.mu.Unlock()
		if held {
			_, _ = call(c, c.bg, func() (string, error) { return c.client().Sync(c.root) })
		}
	}
}

// connect starts a client with a fresh state (no session, no zxid seen)
// behind a new gate. The client connects in the background; the gate's
// session channel closes at its first session.
func (c *Coordinator) connect() (*gate, *zk.Conn, error) {
	g := &gate{
		dial:        c.dialer,
		onHandshake: c.onHandshake,
		onNoAnswer:  c.onNoAnswer,
		limit:       max(time.Second, c.cfg.Timing.LeaseTTL/3),
		session:     make(chan struct{}),
	}
	conn, _, err := zk.Connect(c.cfg.Servers, c.cfg.Timing.LeaseTTL,
		zk.WithDialer(g.Dial),
		zk.WithLogger(zkLogger{c.log}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(c.onEvent),
	)
	if err != nil {
		return nil, nil, err
	}
	return g, conn, nil
}

// Root is the node path of this cluster, "<prefix>/<cluster>".
func (c *Coordinator) Root() string { return c.root }

// Conn is the current underlying client (for tools and tests). It is
// replaced when the servers keep refusing it (see the package comment).
func (c *Coordinator) Conn() *zk.Conn { return c.conn.Load() }

// client is the current client.
func (c *Coordinator) client() *zk.Conn { return c.conn.Load() }

// SessionID is the session the server last confirmed (0 while there is
// none).
func (c *Coordinator) SessionID() int64 { return c.sid.Load() }

// SessionTimeout is the session timeout the server negotiated.
func (c *Coordinator) SessionTimeout() time.Duration { return time.Duration(c.negotiated.Load()) }

// Close ends the session (the server deletes its owner nodes at once; the
// reservations are separate, persistent nodes and stay), stops background
// work and ends every lease not yet released.
func (c *Coordinator) Close() error {
	_, conn, ok := c.markClosed()
	if !ok {
		return nil
	}
	c.stop()
	conn.Close()
	c.finishAll("coordinator closed")
	c.wg.Wait()
	return nil
}

// Abandon stops the coordinator abruptly, as a crashed process would: the
// connection is cut and no close reaches the server, so its owner nodes
// linger until the session times out. For tests and fault injection.
func (c *Coordinator) Abandon() {
	g, conn, ok := c.markClosed()
	if !ok {
		return
	}
	g.abandon()
	c.stop()
	conn.Close()
	c.finishAll("coordinator abandoned")
	c.wg.Wait()
}

// track counts one more goroutine that Close waits for; false once the
// coordinator is closed (Close may already be waiting).
func (c *Coordinator) track() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.track0()
}

// track0 is track with c.mu held.
func (c *Coordinator) track0() bool {
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// markClosed marks the coordinator closed and returns the client and gate
// current at that moment (a client set up later is closed by redial
// itself); false if it already was.
func (c *Coordinator) markClosed() (*gate, *zk.Conn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, false
	}
	c.closed = true
	return c.gate, c.conn.Load(), true
}

func (c *Coordinator) finishAll(why string) {
	c.mu.Lock()
	ls := make([]*lease, 0, len(c.leases))
	for l := range c.leases {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.Finish(why)
	}
}

// onHandshake runs for every handshake answer of a client not given up
// (its gate not abandoned): a new session ends every lease of the one
// before, an expiry (session 0) ends them all.
func (c *Coordinator) onHandshake(sessionID int64, timeout time.Duration) {
	old := c.sid.Swap(sessionID)
	if sessionID != 0 {
		c.negotiated.Store(int64(timeout))
	}
	defer c.handshook()
	if old != 0 && old != sessionID {
		if sessionID == 0 {
			c.log.Warn("zookeeper session expired", "session", fmt.Sprintf("%#x", old))
		} else {
			c.log.Warn("zookeeper session replaced", "old", fmt.Sprintf("%#x", old), "new", fmt.Sprintf("%#x", sessionID))
		}
		c.sessionEnded(old, "zookeeper session expired")
	}
}

// onNoAnswer runs each time a connection of g's client ended without an
// answer to its connect request (the TCP connection was made, the server
// closed it), with the number of such rounds since the last answer and
// when the first of them ended. A server whose data is older than what the
// client has seen (restored from an older copy of its data directory)
// refuses that client this way on every reconnect, for good. Once this has
// gone on for the negotiated session timeout, the session is lost for firn
// whatever the servers think of it, and only a client with a fresh state
// can get a session again: redial.
func (c *Coordinator) onNoAnswer(g *gate, rounds int, since time.Time) {
	to := c.SessionTimeout()
	lasted := time.Since(since)
	c.log.Debug("zookeeper server closed the connection without answering the connect request",
		"rounds", rounds, "for", lasted.Round(time.Millisecond))
	if rounds < 2 || to <= 0 || lasted < to {
		return
	}
	c.mu.Lock()
	if c.closed || c.gate != g || c.redialing || !c.track0() {
		c.mu.Unlock()
		return
	}
	c.redialing = true
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		c.redial(g, rounds, lasted)
	}()
}

// redial gives up the client behind gate old and sets up a new one with a
// fresh state. Every lease of the old session ends first, as on an expiry
// (no old owner node is ever re-created: the node acquires again through
// the fence). Until the new client has a session (and has authenticated)
// the old, closed client stays current, so every call meanwhile fails as
// unavailable.
func (c *Coordinator) redial(old *gate, rounds int, refusedFor time.Duration) {
	defer func() {
		c.mu.Lock()
		c.redialing = false
		c.mu.Unlock()
	}()
	// No handshake of the old client counts from here on.
	old.abandon()
	sid := c.sid.Swap(0)
	c.log.Warn("zookeeper servers keep closing the connection without answering the connect request: "+
		"giving up this client and its session and connecting anew (a server restored from an older copy "+
		"of its data refuses a client that has seen more)",
		"session", fmt.Sprintf("%#x", sid), "rounds", rounds, "for", refusedFor.Round(time.Millisecond),
		"session_timeout", c.SessionTimeout())
	if sid != 0 {
		c.sessionEnded(sid, "zookeeper session given up: the servers keep refusing it")
	}
	c.client().Close() // still the old client: only redial replaces it

	var g *gate
	var conn *zk.Conn
	for {
		var err error
		if g, conn, err = c.connect(); err == nil {
			break
		}
		c.log.Warn("zookeeper connect", "servers", strings.Join(c.cfg.Servers, ","), "err", err)
		if !c.pause(time.Second) {
			return
		}
	}
	drop := func() {
		g.abandon()
		conn.Close()
	}
	select {
	case <-g.session:
	case <-c.bg.Done():
		drop()
		return
	}
	if c.cfg.Auth != "" {
		for {
			_, err := callOn(c, c.bg, false, func() (struct{}, error) {
				return struct{}{}, conn.AddAuth("digest", []byte(c.cfg.Auth))
			})
			if err == nil {
				break
			}
			c.log.Warn("zookeeper digest auth on the new client", "err", err)
			if !c.pause(time.Second) {
				drop()
				return
			}
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		drop()
		return
	}
	c.gate = g
	c.conn.Store(conn)
	c.mu.Unlock()
	neg := c.SessionTimeout()
	if err := c.cfg.checkSession(neg, "negotiated"); err != nil {
		c.log.Warn("zookeeper session on the new client", "err", err)
	}
	c.log.Info("zookeeper session established on a new client", "session", fmt.Sprintf("%#x", c.sid.Load()),
		"timeout", neg, "servers", strings.Join(c.cfg.Servers, ","))
}

// nextHandshake returns a channel closed at the next handshake answer of
// the coordinator's client (a session, the same or a new one, or an
// expiry): from then on a request is sent on a connection again.
func (c *Coordinator) nextHandshake() <-chan struct{} {
	c.hsMu.Lock()
	defer c.hsMu.Unlock()
	if c.handshake == nil {
		c.handshake = make(chan struct{})
	}
	return c.handshake
}

// handshook wakes every waiter of nextHandshake (after the session's
// leases were ended, if it expired).
func (c *Coordinator) handshook() {
	c.hsMu.Lock()
	defer c.hsMu.Unlock()
	if c.handshake != nil {
		close(c.handshake)
		c.handshake = nil
	}
}

// awaitConnection follows a request that failed with err. When err says
// the client had no connection (zk.ErrNoServer: it was between
// connections and failed its queue; zk.ErrConnectionClosed: the
// connection closed under the request), it waits for next (from
// nextHandshake, taken before the request), so that the next request is
// sent on a connection: one sent sooner fails at once, or waits in the
// client's queue past its own timeout while the client reconnects (a
// second or more with one server). A write's rounds are spent on
// answers, not on the client's reconnecting. The wait ends with ctx (false),
// with the coordinator, or after a session timeout (a session without a
// connection for that long is lost anyway; the next request says so).
func (c *Coordinator) awaitConnection(ctx context.Context, next <-chan struct{}, err error) bool {
	if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
		return ctx.Err() == nil
	}
	t := time.NewTimer(max(c.SessionTimeout(), c.cfg.Timing.Timeout))
	defer t.Stop()
	select {
	case <-next:
	case <-t.C:
	case <-c.bg.Done():
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}

// sessionEnded ends every lease taken in session id and remembers their
// slots (coordinator.EndedSlots): the next acquisition of their generator
// takes them again first.
func (c *Coordinator) sessionEnded(id int64, why string) {
	c.mu.Lock()
	var ls []*lease
	for l := range c.leases {
		if l.session != id {
			continue
		}
		ls = append(ls, l)
		c.ended.Add(l.Spec().Generator, l.Slot(), id)
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.Finish(why)
	}
}

func (c *Coordinator) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateDisconnected, zk.StateHasSession, zk.StateExpired, zk.StateAuthFailed:
		c.log.Debug("zookeeper connection state", "state", ev.State.String(), "server", ev.Server)
	}
}

// register tracks a new lease, its slot no longer one of an ended session
// to take again; it ends at once if its session is already gone (an
// expiry raced with the acquisition), its slot then remembered as
// sessionEnded would have. Either sessionEnded sees the lease (the
// session's end came after it was tracked) or the session had been
// swapped out before (sessionEnded runs after the swap), which the check
// here sees.
func (c *Coordinator) register(l *lease) {
	c.mu.Lock()
	c.ended.Forget(l.Spec().Generator, l.Slot())
	c.leases[l] = struct{}{}
	c.mu.Unlock()
	if c.sid.Load() != l.session {
		c.ended.Add(l.Spec().Generator, l.Slot(), l.session)
		l.Finish("zookeeper session ended during acquisition")
	}
}

func (c *Coordinator) unregister(l *lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// liveOwnerNodes is the set of owner-node creation zxids this coordinator's
// live leases hold.
func (c *Coordinator) liveOwnerNodes() map[int64]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[int64]bool, len(c.leases))
	for l := range c.leases {
		m[l.czxid] = true
	}
	return m
}

// --- calls -------------------------------------------------------------------

// errTimeout marks a call whose outcome is unknown because no answer came
// in time (the request may still be applied later).
var errTimeout = errors.New("zookeeper: no answer in time")

type result[T any] struct {
	v   T
	err error
}

// call runs one client request bounded by the coordinator timeout and ctx.
// The client has no per-request deadline: a request given up on stays
// queued and may still be sent and applied, which every caller allows for
// (all writes are version-fenced).
func call[T any](c *Coordinator, ctx context.Context, f func() (T, error)) (T, error) {
	return callOn(c, ctx, true, f)
}

// callOn is call; own says whether f's answer counts for the session of
// the coordinator's own client (Lease.Assured): a write or a sync through
// it, which the leader answers; not a probe's request (see via), nor a
// read, which a follower answers from its own copy (see read).
func callOn[T any](c *Coordinator, ctx context.Context, own bool, f func() (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timing.Timeout)
	defer cancel()
	ch := make(chan result[T], 1)
	sid, sent := c.sid.Load(), time.Now()
	if !c.track() {
		var zero T
		return zero, zk.ErrClosing
	}
	go func() {
		defer c.wg.Done()
		v, err := f()
		ch <- result[T]{v, err}
	}()
	select {
	case r := <-ch:
		if own && answered(r.err) && sid != 0 && c.sid.Load() == sid {
			c.okMu.Lock()
			switch {
			case c.okSid == sid && sent.Sub(c.okSent) >= c.assuredSpan():
				// Answered, but sent a session timeout after the last
				// answered request: the session may have expired in
				// between (and been brought back by a restore).
				c.lapsedSid, c.lapsedAt = sid, time.Now()
				c.okSent = sent
			case c.okSid != sid || sent.After(c.okSent):
				c.okSid, c.okSent = sid, sent
			}
			c.okMu.Unlock()
		}
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: %w", errTimeout, ctx.Err())
	}
}

// answered reports whether err is the server's answer (none, or one of
// the answers about nodes and versions), not a failure to reach it.
func answered(err error) bool {
	return err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNodeExists) ||
		errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNotEmpty)
}

// assuredSpan is how long after an answered request of the session was
// sent the servers keep the session at least: the session timeout, less
// the leader's lag in hearing of it. A follower answers the request (a
// sync or a write goes through the leader, which does not count it for
// the session) and tells the leader of the session's activity only in its
// reply to the leader's next ping, sent every half tick: cut off from the
// leader before that reply, the session expires on the leader up to half
// a tick earlier than the request's send time says
// (TestAssuredEndsWithTheSessionOnACutOffFollower found it 38 ms early).
// The tick is unknown here; ZooKeeper's minimum session timeout is two
// ticks unless an operator lowers it, so half a tick is at most a quarter
// of the timeout.
func (c *Coordinator) assuredSpan() time.Duration {
	t := c.SessionTimeout()
	return t - t/4
}

// assured is how long the server keeps session sid at least, from now,
// for a lease taken at since: assuredSpan after the latest answered
// request of it was sent. Once it has run out for a lease it stays 0: the
// session may have expired meanwhile, and a server restored from an older
// copy may take it back.
func (c *Coordinator) assured(sid int64, since time.Time) time.Duration {
	c.okMu.Lock()
	defer c.okMu.Unlock()
	if sid == 0 || c.okSid != sid || c.sid.Load() != sid {
		return 0
	}
	if c.lapsedSid == sid && !since.After(c.lapsedAt) {
		return 0
	}
	a := time.Until(c.okSent.Add(c.assuredSpan()))
	if a <= 0 {
		c.lapsedSid, c.lapsedAt = sid, time.Now()
		return 0
	}
	return a
}

type getResult struct {
	data []byte
	stat *zk.Stat
}

func (c *Coordinator) get(ctx context.Context, path string) ([]byte, *zk.Stat, error) {
	return c.own().get(ctx, path)
}

// exists returns the node's stat, nil when it does not exist.
func (c *Coordinator) exists(ctx context.Context, path string) (*zk.Stat, error) {
	return c.own().exists(ctx, path)
}

func (c *Coordinator) children(ctx context.Context, path string) ([]string, error) {
	return callOn(c, ctx, false, func() ([]string, error) { // a read: see read
		ch, _, err := c.client().Children(path)
		return ch, err
	})
}

func (c *Coordinator) create(ctx context.Context, path string, data []byte, flags int32) error {
	return c.own().create(ctx, path, data, flags)
}

func (c *Coordinator) multi(ctx context.Context, ops []any) ([]zk.MultiResponse, error) {
	return call(c, ctx, func() ([]zk.MultiResponse, error) { return c.client().Multi(ops...) })
}

// failedOp is the index of the op that made a multi fail: the ops before
// it answer OK, the ones after it "rolled back". -1 if none is marked.
func failedOp(res []zk.MultiResponse) int {
	for i, r := range res {
		if r.Error != nil {
			return i
		}
	}
	return -1
}

// isPermanent reports errors a retry cannot fix.
func isPermanent(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) ||
		errors.Is(err, zk.ErrInvalidACL) || errors.Is(err, zk.ErrInvalidPath) ||
		errors.Is(err, context.Canceled)
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: zookeeper %s: %w", coordinator.ErrUnavailable, op, err)
}

// ensurePath creates every missing element of path (persistent, firn's
// ACL).
func (c *Coordinator) ensurePath(ctx context.Context, path string) error {
	return c.own().ensurePath(ctx, path)
}

// ensureGenerator makes sure a generator's owner and reserved parents exist.
func (c *Coordinator) ensureGenerator(ctx context.Context, p paths) error {
	c.mu.Lock()
	ok := c.ensured[p.base]
	c.mu.Unlock()
	if ok {
		return nil
	}
	for _, dir := range []string{p.owners(), p.reservations()} {
		if err := c.ensurePath(ctx, dir); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.ensured[p.base] = true
	c.mu.Unlock()
	return nil
}

// forgetGenerator drops a generator from the known-to-exist cache.
func (c *Coordinator) forgetGenerator(p paths) {
	c.mu.Lock()
	delete(c.ensured, p.base)
	c.mu.Unlock()
}

// --- paths and records -------------------------------------------------------

type paths struct{ base string }

func (c *Coordinator) paths(generator string) paths { return paths{base: c.root + "/" + generator} }

func (p paths) pin() string                        { return p.base + "/pin" }
func (p paths) cursor() string                     { return p.base + "/cursor" }
func (p paths) floor() string                      { return p.base + "/floor" }
func (p paths) restored() string                   { return p.base + "/restored" }
func (p paths) markerGen() string                  { return p.base + "/restored-gen" }
func (p paths) counter() string                    { return p.base + "/counter" }
func (p paths) definition() string                 { return p.base + "/definition" }
func (p paths) owners() string                     { return p.base + "/owner" }
func (p paths) reservations() string               { return p.base + "/reserved" }
func (p paths) owner(s coordinator.Slot) string    { return p.owners() + "/" + s.Key() }
func (p paths) reserved(s coordinator.Slot) string { return p.reservations() + "/" + s.Key() }

// encodeValue is the text of a reservation or cursor node.
func encodeValue(v int64) []byte { return []byte(strconv.FormatInt(v, 10)) }

// parseValue reads a stored number in the canonical encoding only (what
// encodeValue writes: no sign but '-', no padding, no space); anything else
// is refused, never guessed at.
func parseValue(b []byte) (int64, error) {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != string(b) {
		return 0, fmt.Errorf("%q is not a decimal number in the canonical encoding", b)
	}
	return v, nil
}

// parsePath reads the number stored at path, naming the path when it is
// not in the canonical encoding.
func parsePath(path string, b []byte) (int64, error) {
	v, err := parseValue(b)
	if err != nil {
		return 0, fmt.Errorf("zookeeper: %s holds %q, not a number in the canonical encoding: refusing to guess", path, b)
	}
	return v, nil
}

// neverReserved is the content of a reservation node created for a slot
// that was never reserved.
var neverReserved = encodeValue(-1)

// pin is the generator's pin record.
type pin = coordinator.Pin

// ownerRecord is the data of owner/<slot> (shared with the etcd backend).
type ownerRecord = coordinator.OwnerRecord

func encodeOwner(hb coordinator.Heartbeat) []byte { return coordinator.EncodeOwner(hb) }
func decodeOwner(b []byte) ownerRecord            { return coordinator.DecodeOwner(b) }

// --- the connection gate -----------------------------------------------------

// gate wraps the dialer of one client. It reads each connection's
// handshake answer (the session ID and negotiated timeout, which the client
// does not expose), bounds the handshake read so that a frozen server
// cannot hold the client for ten receive timeouts (the client's own
// deadline), counts the connections a server closed without answering the
// connect request, and can refuse all further connections (Abandon, and a
// client given up by redial). An abandoned gate reports nothing more.
type gate struct {
	dial        Dialer
	onHandshake func(sessionID int64, timeout time.Duration)
	onNoAnswer  func(g *gate, rounds int, since time.Time)
	limit       time.Duration
	session     chan struct{} // closed at the first session answered
	sessOnce    sync.Once

	mu        sync.Mutex
	abandoned bool
	conns     map[*gateConn]struct{}
	// refused counts the connections ended without a connect answer since
	// the last answer; refusedSince is when the first of them ended.
	refused      int
	refusedSince time.Time
}

var errAbandoned = errors.New("zookeeper: coordinator abandoned")

// Dial implements zk.Dialer.
func (g *gate) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	g.mu.Lock()
	if g.abandoned {
		g.mu.Unlock()
		return nil, errAbandoned
	}
	g.mu.Unlock()
	nc, err := g.dial(network, address, timeout)
	if err != nil {
		return nil, err
	}
	gc := &gateConn{Conn: nc, g: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		nc.Close()
		return nil, errAbandoned
	}
	if g.conns == nil {
		g.conns = map[*gateConn]struct{}{}
	}
	g.conns[gc] = struct{}{}
	return gc, nil
}

// abandon cuts every connection and refuses new ones. Once it returns, no
// handshake of this gate's client is reported any more.
func (g *gate) abandon() {
	g.mu.Lock()
	g.abandoned = true
	cs := g.conns
	g.conns = nil
	g.mu.Unlock()
	for gc := range cs {
		gc.Conn.Close()
	}
}

// answered reports a handshake answer (under g.mu, so that abandon waits
// for a report under way) and ends a run of unanswered connections.
func (g *gate) answered(id int64, timeout time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		return
	}
	g.refused, g.refusedSince = 0, time.Time{}
	g.onHandshake(id, timeout)
	if id != 0 {
		g.sessOnce.Do(func() { close(g.session) })
	}
}

// unanswered counts a connection the server ended before answering the
// connect request.
func (g *gate) unanswered() {
	g.mu.Lock()
	if g.abandoned {
		g.mu.Unlock()
		return
	}
	if g.refused == 0 {
		g.refusedSince = time.Now()
	}
	g.refused++
	rounds, since := g.refused, g.refusedSince
	g.mu.Unlock()
	g.onNoAnswer(g, rounds, since)
}

type gateConn struct {
	net.Conn
	g      *gate
	buf    []byte
	hsDone atomic.Bool
	failed atomic.Bool // counted as unanswered
	once   sync.Once
}

func (gc *gateConn) Close() error {
	gc.once.Do(func() {
		gc.g.mu.Lock()
		delete(gc.g.conns, gc)
		gc.g.mu.Unlock()
	})
	return gc.Conn.Close()
}

// SetReadDeadline bounds reads to the handshake limit until the handshake
// answer has been read.
func (gc *gateConn) SetReadDeadline(t time.Time) error {
	if !gc.hsDone.Load() {
		if lim := time.Now().Add(gc.g.limit); t.IsZero() || t.After(lim) {
			t = lim
		}
	}
	return gc.Conn.SetReadDeadline(t)
}

func (gc *gateConn) Read(p []byte) (int, error) {
	n, err := gc.Conn.Read(p)
	if n > 0 && !gc.hsDone.Load() {
		gc.buf = append(gc.buf, p[:n]...)
		if len(gc.buf) >= 4 {
			want := 4 + int(binary.BigEndian.Uint32(gc.buf[:4]))
			if len(gc.buf) >= want || want > 1<<16 {
				gc.hsDone.Store(true)
				if len(gc.buf) >= want {
					if id, to, ok := parseConnectResponse(gc.buf[4:want]); ok {
						gc.g.answered(id, to)
					}
				}
				gc.buf = nil
			}
		}
	}
	if err != nil && !gc.hsDone.Load() {
		gc.noAnswer(err)
	}
	return n, err
}

func (gc *gateConn) Write(p []byte) (int, error) {
	n, err := gc.Conn.Write(p)
	if err != nil && !gc.hsDone.Load() {
		gc.noAnswer(err)
	}
	return n, err
}

// noAnswer counts the connection as ended by the server before it answered
// the connect request: once, and only for an error from the peer (end of
// stream, reset), never for a deadline (a slow or frozen server) or a
// connection closed on this side.
func (gc *gateConn) noAnswer(err error) {
	var ne net.Error
	if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	if gc.failed.CompareAndSwap(false, true) {
		gc.g.unanswered()
	}
}

// parseConnectResponse decodes a handshake answer: protocolVersion int32,
// timeOut int32 (ms), sessionId int64, passwd buffer. Session 0 means the
// session expired.
func parseConnectResponse(b []byte) (int64, time.Duration, bool) {
	if len(b) < 16 {
		return 0, 0, false
	}
	to := int32(binary.BigEndian.Uint32(b[4:8]))
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	return id, time.Duration(to) * time.Millisecond, true
}

// zkLogger routes the client's own messages (connection failures and the
// like) to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.log.Debug("zookeeper client", "msg", fmt.Sprintf(format, args...))
}

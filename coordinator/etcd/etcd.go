package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// Coordinator is the etcd backend. All its leases share one etcd lease (a
// session, granted on first use and again after it is lost), kept alive by
// the client; ownership of each slot is its own owner key, fenced by that
// key's create revision.
type Coordinator struct {
	cfg   Config
	cli   *clientv3.Client
	kaCli *clientv3.Client // lease renewals only
	clock clockguard.Clock
	log   *slog.Logger
	root  string // "/<prefix>/<cluster>/"

	// grant serialises session grants: a one-slot semaphore, taken within
	// the caller's context, so that a caller never waits past its deadline
	// on another caller's grant (one a frozen member does not answer).
	grant  chan struct{}
	mu     sync.Mutex
	sess   *session
	closed bool
	// held maps the owner key of every live lease of this coordinator to
	// the create revision it holds; pending counts acquisitions whose take
	// txn is in flight per owner key. An owner key bound to the current
	// etcd lease that is in neither is a stray (a take whose reply was
	// lost) and is deleted by the next Acquire.
	held    map[string]int64
	pending map[string]int
	// ended: the slots of leases whose etcd lease ended (see newLease).
	ended coordinator.EndedSlots

	peersOnce  sync.Once
	peersReady chan struct{}
	peersMu    sync.Mutex
	peers      map[string]coordinator.PeerBeat
	peersErr   error

	stop context.CancelFunc // ends background work
	bg   context.Context
	wg   sync.WaitGroup
}

var _ coordinator.Backend = (*Coordinator)(nil)

// session is one etcd lease with its keepalive.
type session struct {
	id   clientv3.LeaseID
	done chan struct{} // closed when the keepalive ends: the lease is gone
	stop context.CancelFunc
	// base is read before the grant was sent; sent is when the last
	// acknowledged renewal (or the grant) was sent, as nanoseconds after
	// base: etcd keeps the lease at least TTL after it.
	base time.Time
	sent atomic.Int64
	ttl  time.Duration
	// lapsedAt: when (after base) a TTL was last found passed with no
	// renewal acknowledged; 0: never.
	lapsedAt atomic.Int64
	// unsure: a take txn bound to this lease got no answer (it may be
	// applied after the retry's scan, a stray owner key), or failed on an
	// owner key already bound to it; from then on each acknowledged
	// renewal asks the sweeper (sweep) for sweepStrays.
	unsure atomic.Bool
	sweep  chan struct{}
}

// assured is how long etcd keeps the lease at least, from now, for a
// holding taken at since. Once it has run out (or a renewal was sent a
// TTL after the last acknowledged one: a pause) it stays 0 for every
// holding taken before: the lease may have ended meanwhile and been
// revived by a restore, the ownership given away in between.
func (s *session) assured(since time.Time) time.Duration {
	select {
	case <-s.done:
		return 0
	default:
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

// askSweep asks the session's sweeper for a sweepStrays; it never waits
// (the sweeper runs beside the renewals, and one request pending is
// enough).
func (s *session) askSweep() {
	select {
	case s.sweep <- struct{}{}:
	default:
	}
}

// lapse records that the lease's assurance ran out now.
func (s *session) lapse() { s.lapsedAt.Store(int64(max(time.Since(s.base), 1))) }

// New connects to etcd. It returns an error matching
// coordinator.ErrInvalidSpec for a bad configuration, or one matching
// coordinator.ErrUnavailable when no endpoint answers within DialTimeout.
func New(cfg Config) (*Coordinator, error) { return NewContext(context.Background(), cfg) }

// NewContext is New, given up on (ErrUnavailable) when ctx ends before an
// endpoint answered: for a caller that dials in the background and must be
// able to stop (coordinator.NewLazy).
func NewContext(ctx context.Context, cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ccfg := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    cfg.KeepAlive,
		DialKeepAliveTimeout: cfg.KeepAlive,
		PermitWithoutStream:  true,
		Username:             cfg.Username,
		Password:             cfg.Password,
		TLS:                  tc,
		Logger:               zap.NewNop(),
		DialOptions:          cfg.dialOptions,
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd connect %v: %w", coordinator.ErrUnavailable, cfg.Endpoints, err)
	}
	// Lease renewals get a client of their own: the balancer rotates
	// members per call, and other traffic interleaved with the renewals
	// could keep sending each retry to the same frozen member.
	kaCli, err := clientv3.New(ccfg)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: etcd connect %v: %w", coordinator.ErrUnavailable, cfg.Endpoints, err)
	}
	// clientv3.New does not wait for a connection; one bounded read makes
	// a wrong endpoint or wrong credentials fail here, with its reason.
	gctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	_, err = cli.Get(gctx, "/"+strings.Trim(cfg.Prefix, "/")+"/", clientv3.WithCountOnly())
	cancel()
	if err != nil {
		cli.Close()
		kaCli.Close()
		return nil, fmt.Errorf("%w: etcd %v: %w", coordinator.ErrUnavailable, cfg.Endpoints, err)
	}
	bg, stop := context.WithCancel(context.Background())
	return &Coordinator{
		cfg:        cfg,
		cli:        cli,
		kaCli:      kaCli,
		clock:      cfg.Clock,
		log:        log.With("coordinator", "etcd", "cluster", cfg.Cluster),
		root:       "/" + strings.Trim(cfg.Prefix, "/") + "/" + cfg.Cluster + "/",
		peersReady: make(chan struct{}),
		peers:      map[string]coordinator.PeerBeat{},
		grant:      make(chan struct{}, 1),
		held:       map[string]int64{},
		pending:    map[string]int{},
		bg:         bg,
		stop:       stop,
	}, nil
}

// Client is the underlying etcd client (for tools and tests).
func (c *Coordinator) Client() *clientv3.Client { return c.cli }

// Root is the key prefix of this cluster, "/<prefix>/<cluster>/".
func (c *Coordinator) Root() string { return c.root }

// Close stops background work and closes the client. Leases not released
// stay owned until their TTL runs out (as after a crash); their
// reservations are kept.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		// Revoking frees the owner keys now instead of after the TTL; the
		// reservations are separate keys and stay.
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timing.Timeout)
		_, _ = c.cli.Revoke(ctx, s.id)
		cancel()
		s.stop()
	}
	c.stop()
	err := c.cli.Close()
	c.kaCli.Close()
	c.wg.Wait()
	return err
}

// Abandon stops the coordinator abruptly, as a crashed process would: no
// revoke, no release, no more keepalives; its ownership lingers until the
// TTL runs out. For tests and fault injection.
func (c *Coordinator) Abandon() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.stop()
	}
	c.stop()
	_ = c.cli.Close()
	_ = c.kaCli.Close()
	c.wg.Wait()
}

// call bounds one etcd request by the coordinator timeout.
func (c *Coordinator) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.Timing.Timeout)
}

// unavailable wraps an etcd error. A permission or auth error is not
// retried by callers, but still wraps ErrUnavailable: the coordinator did
// not do what was asked.
func unavailable(op string, err error) error {
	return fmt.Errorf("%w: etcd %s: %w", coordinator.ErrUnavailable, op, err)
}

// getSession returns the live session, granting a new lease if there is
// none. It waits for another caller's grant only within ctx.
func (c *Coordinator) getSession(ctx context.Context) (*session, error) {
	select {
	case c.grant <- struct{}{}:
	case <-ctx.Done():
		return nil, unavailable("grant", ctx.Err())
	case <-c.bg.Done():
		return nil, fmt.Errorf("%w: etcd coordinator closed", coordinator.ErrUnavailable)
	}
	defer func() { <-c.grant }()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: etcd coordinator closed", coordinator.ErrUnavailable)
	}
	if s := c.sess; s != nil {
		select {
		case <-s.done:
			c.sess = nil
		default:
			c.mu.Unlock()
			return s, nil
		}
	}
	c.mu.Unlock()

	base := time.Now()
	cctx, cancel := c.call(ctx)
	g, err := c.cli.Grant(cctx, int64(c.cfg.Timing.LeaseTTL/time.Second))
	cancel()
	if err != nil {
		return nil, unavailable("grant", err)
	}
	kctx, stop := context.WithCancel(c.bg)
	s := &session{id: g.ID, done: make(chan struct{}), stop: stop, base: base, ttl: time.Duration(g.TTL) * time.Second,
		sweep: make(chan struct{}, 1)}
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		why := c.keepAlive(kctx, s)
		close(s.done)
		c.log.Info("etcd lease ended", "lease", fmt.Sprintf("%x", int64(s.id)), "reason", why)
	}()
	go func() {
		defer c.wg.Done()
		c.sweeper(kctx, s)
	}()
	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()
	c.log.Info("etcd lease granted", "lease", fmt.Sprintf("%x", int64(g.ID)), "ttl", g.TTL)
	return s, nil
}

// keepAlive renews the lease every TTL/5 with KeepAliveOnce, each bounded
// by min(call timeout, TTL/10) and retried at once after a failure, until kctx ends or the lease is gone. It does not use
// the client's long-lived keepalive stream: a stream stuck on a frozen
// member is only dropped after the gRPC keepalive fires and may be re-opened
// on the same member, while each KeepAliveOnce is a new stream that the
// balancer sends to the next member. The lease is declared lost (the return)
// once TTL has passed since the last renewal that was acknowledged, counted
// from when it was sent: the server may have expired it by then.
func (c *Coordinator) keepAlive(kctx context.Context, s *session) string {
	id := s.id
	ttl := c.cfg.Timing.LeaseTTL
	interval := ttl / 5
	// A renewal answers in milliseconds; a short bound per attempt gives
	// many attempts, on different members, within one TTL.
	attempt := min(c.cfg.Timing.Timeout, interval/2)
	lastSent := s.base
	wait := interval
	for {
		select {
		case <-kctx.Done():
			return "stopped"
		case <-time.After(wait):
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(kctx, attempt)
		resp, err := c.kaCli.KeepAliveOnce(cctx, id)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			if sent.Sub(lastSent) >= ttl {
				// Acknowledged, but sent a TTL after the last acknowledged
				// renewal (a pause): the lease may have ended in between
				// and been revived by a restore. Holdings taken before are
				// no longer assured (Lease.Assured).
				s.lapse()
			}
			lastSent, wait = sent, interval
			s.sent.Store(int64(sent.Sub(s.base)))
			if s.unsure.Load() {
				s.askSweep()
			}
			continue
		case err == nil:
			return "lease expired"
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return "lease not found"
		case kctx.Err() != nil:
			return "stopped"
		}
		if time.Since(lastSent) >= ttl {
			return fmt.Sprintf("no renewal acknowledged for %v: %v", ttl, err)
		}
		c.log.Warn("etcd lease renewal failed", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
		wait = 0
	}
}

// --- keys and values -------------------------------------------------------

type keys struct{ base string }

func (c *Coordinator) keys(generator string) keys { return keys{base: c.root + generator + "/"} }

func (k keys) pin() string          { return k.base + "pin" }
func (k keys) cursor() string       { return k.base + "cursor" }
func (k keys) floor() string        { return k.base + "floor" }
func (k keys) restored() string     { return k.base + "restored" }
func (k keys) counter() string      { return k.base + "counter" }
func (k keys) definition() string   { return k.base + "definition" }
func (k keys) owners() string       { return k.base + "owner/" }
func (k keys) reservations() string { return k.base + "reserved/" }
func (k keys) owner(s coordinator.Slot) string {
	return k.owners() + s.Key()
}
func (k keys) reserved(s coordinator.Slot) string {
	return k.reservations() + s.Key()
}

// pad encodes a non-negative value as 19 decimal digits, the canonical
// form of every number firn stores in etcd.
func pad(v int64) string { return fmt.Sprintf("%019d", v) }

// parseValue reads a stored number in the canonical encoding only (19
// decimal digits): anything else ("42", "+42", " 42", text) is refused,
// never guessed at and never compared as text.
func parseValue(b []byte) (int64, error) {
	if len(b) != 19 {
		return 0, fmt.Errorf("%q is not a 19-digit decimal", b)
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a 19-digit decimal", b)
		}
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// parseKey reads the number stored at key, naming the key when it is not
// in the canonical encoding.
func parseKey(key string, b []byte) (int64, error) {
	v, err := parseValue(b)
	if err != nil {
		return 0, fmt.Errorf("etcd: %s holds %q, not a number in the canonical encoding: refusing to guess", key, b)
	}
	return v, nil
}

// pin is the generator's pin record.
type pin = coordinator.Pin

// ownerRecord is the value of owner/<slot> (shared with the ZooKeeper
// backend).
type ownerRecord = coordinator.OwnerRecord

func newOwnerRecord(hb coordinator.Heartbeat) string { return string(coordinator.EncodeOwner(hb)) }

// raiseCursor is the nested txn that sets the cursor to v only when it is
// absent or lower. It compares values as text, which orders them only in
// the canonical encoding: the cursor orders slots and never decides
// safety, and the scan refuses a cursor that is not canonical. Every
// number that does decide safety (reservations, the generator floor) is
// read, parsed and compared as a number, and written guarded on the mod
// revision read.
func raiseCursor(key string, v int64) clientv3.Op {
	p := pad(v)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Version(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, p)},
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", p)},
			[]clientv3.Op{clientv3.OpPut(key, p)}, nil)},
	)
}

// stored is a number key as read: its value (-1: absent) and mod revision
// (0: absent).
type stored struct {
	value  int64
	modRev int64
}

// readStored parses a range response of key: absent is {-1, 0}.
func readStored(key string, kvs []*mvccpb.KeyValue) (stored, error) {
	if len(kvs) == 0 {
		return stored{value: -1}, nil
	}
	v, err := parseKey(key, kvs[0].Value)
	if err != nil {
		return stored{}, err
	}
	return stored{value: v, modRev: kvs[0].ModRevision}, nil
}

// raiseNumber raises the number at key to at least v and returns what it
// holds afterwards: it reads the value, parses it as a number (refusing one
// that does not parse, naming the key), decides numerically, writes
// guarded on the mod revision read (retrying when it moved), and checks
// that the stored value is the one sent. It never lowers the value.
func (c *Coordinator) raiseNumber(ctx context.Context, key string, v int64) (int64, error) {
	for attempt := 0; attempt < 10; attempt++ {
		cctx, cancel := c.call(ctx)
		g, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return 0, unavailable("read "+key, err)
		}
		cur, err := readStored(key, g.Kvs)
		if err != nil {
			return 0, err
		}
		if cur.value >= v {
			return cur.value, nil
		}
		cctx, cancel = c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.modRev)).
			Then(clientv3.OpPut(key, pad(v)), clientv3.OpGet(key)).
			Commit()
		cancel()
		if err != nil {
			return 0, unavailable("raise "+key, err)
		}
		if !resp.Succeeded {
			continue // written meanwhile: read again
		}
		after, err := readStored(key, resp.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return 0, err
		}
		if after.value != v {
			return 0, fmt.Errorf("etcd: %s holds %d after %d was written", key, after.value, v)
		}
		return v, nil
	}
	return 0, fmt.Errorf("%w: etcd raise of %s: value kept changing", coordinator.ErrUnavailable, key)
}

// isPermanent reports etcd errors a retry cannot fix.
func isPermanent(err error) bool {
	s := err.Error()
	return strings.Contains(s, "permission denied") || strings.Contains(s, "authentication failed") ||
		strings.Contains(s, "user name is empty") || strings.Contains(s, "invalid auth token") ||
		errors.Is(err, context.Canceled)
}

// ReservedKey is the key of reserved[slot] of generator under root (see
// Coordinator.Root), for tools and tests that read or write it directly.
func ReservedKey(root, generator string, slot coordinator.Slot) string {
	return keys{base: root + generator + "/"}.reserved(slot)
}

// OwnerKey is the key of owner[slot] of generator under root.
func OwnerKey(root, generator string, slot coordinator.Slot) string {
	return keys{base: root + generator + "/"}.owner(slot)
}

// RestoredKey is the key of generator's restore marker under root.
func RestoredKey(root, generator string) string { return keys{base: root + generator + "/"}.restored() }

// EncodeReserved is how a reservation value is stored.
func EncodeReserved(v int64) string { return pad(v) }

// DecodeReserved parses a stored reservation value (the canonical encoding
// only).
func DecodeReserved(b []byte) (int64, error) { return parseValue(b) }

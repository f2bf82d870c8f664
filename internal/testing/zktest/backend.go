package zktest

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// DefaultAuth is the digest identity the Backend's coordinators use.
const DefaultAuth = "firn:zktest-secret"

// Backend runs the shared coordinator harness (coordtest) on ZooKeeper
// servers a test started: every cluster is a fresh cluster name under one
// prefix, and every coordinator authenticates with Auth.
type Backend struct {
	// Servers are the client addresses (StartStandalone's Addr, or an
	// Ensemble's Addrs).
	Servers []string
	// TTL is the session timeout asked for. Default 3 s.
	TTL time.Duration
	// Auth is the digest identity, default DefaultAuth.
	Auth string
	// Logger, when set, receives the coordinators' logs. Default: none.
	Logger *slog.Logger

	seq  atomic.Int64
	mu   sync.Mutex
	recs []*Recorder
}

var _ coordtest.Backend = (*Backend)(nil)

// endpoint is what a child process needs to reach a cluster.
type endpoint struct {
	Servers []string      `json:"servers"`
	Prefix  string        `json:"prefix"`
	Cluster string        `json:"cluster"`
	Auth    string        `json:"auth"`
	TTL     time.Duration `json:"ttl"`
}

// Prefix is the node path every Backend cluster lives under.
const Prefix = "/firntest"

func (b *Backend) ttl() time.Duration {
	if b.TTL == 0 {
		return 3 * time.Second
	}
	return b.TTL
}

func (b *Backend) auth() string {
	if b.Auth == "" {
		return DefaultAuth
	}
	return b.Auth
}

// Name implements coordtest.Backend.
func (b *Backend) Name() string { return "zookeeper" }

// Config is the coordinator configuration for endpoint e: the harness's
// short TTL, a 1 s call timeout and the short-window test option.
func config(e endpoint, clock clockguard.Clock, log *slog.Logger) zookeeper.Config {
	cfg := zookeeper.DefaultConfig()
	cfg.Servers, cfg.Prefix, cfg.Cluster, cfg.Auth = e.Servers, e.Prefix, e.Cluster, e.Auth
	cfg.Timing.LeaseTTL = e.TTL
	cfg.Timing.AllowShortWindow = true
	cfg.DialTimeout = 20 * time.Second
	cfg.Clock = clock
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = log
	return cfg
}

// NewCluster implements coordtest.Backend.
func (b *Backend) NewCluster(t testing.TB) coordtest.Cluster {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	e := endpoint{Servers: b.Servers, Prefix: Prefix, Cluster: fmt.Sprintf("c%d-%s", b.seq.Add(1), name),
		Auth: b.auth(), TTL: b.ttl()}
	raw, _ := json.Marshal(e)
	cl := &Cluster{b: b, e: e, raw: string(raw), base: Prefix + "/" + e.Cluster}
	cl.admin = AdminConn(t, b.Servers, e.Auth)
	return cl
}

// Dial implements coordtest.Backend (in a child process).
func (b *Backend) Dial(raw string, clock clockguard.Clock) (coordinator.Coordinator, error) {
	var e endpoint
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return nil, fmt.Errorf("zktest: endpoint %q: %w", raw, err)
	}
	rec := &Recorder{}
	b.mu.Lock()
	b.recs = append(b.recs, rec)
	b.mu.Unlock()
	cfg := config(e, clock, b.Logger)
	cfg.Dialer = rec.Dial
	return zookeeper.New(cfg)
}

func (b *Backend) lookup(id int64) (Session, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.recs {
		if s, ok := r.Lookup(id); ok {
			return s, true
		}
	}
	return Session{}, false
}

// Cluster is one test's cluster name on the Backend's servers.
type Cluster struct {
	b     *Backend
	e     endpoint
	raw   string
	base  string
	admin *zk.Conn
}

var _ coordtest.Cluster = (*Cluster)(nil)

// Connect implements coordtest.Cluster: a coordinator with its own
// session, whose handshakes a Recorder watches (for Expire).
func (cl *Cluster) Connect(t testing.TB, clock clockguard.Clock) coordinator.Backend {
	t.Helper()
	return cl.ConnectWith(t, clock, nil)
}

// ConnectWith is Connect with a configuration hook (e.g. a proxy's
// address as the only server).
func (cl *Cluster) ConnectWith(t testing.TB, clock clockguard.Clock, mod func(*zookeeper.Config)) *zookeeper.Coordinator {
	t.Helper()
	rec := &Recorder{}
	cl.b.mu.Lock()
	cl.b.recs = append(cl.b.recs, rec)
	cl.b.mu.Unlock()
	cfg := config(cl.e, clock, cl.b.Logger)
	cfg.Dialer = rec.Dial
	if mod != nil {
		mod(&cfg)
		if cfg.Dialer == nil {
			cfg.Dialer = rec.Dial
		}
	}
	c, err := zookeeper.New(cfg)
	if err != nil {
		t.Fatalf("zktest: zookeeper.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Endpoint implements coordtest.Cluster.
func (cl *Cluster) Endpoint() string { return cl.raw }

// TTL implements coordtest.Cluster.
func (cl *Cluster) TTL() time.Duration { return cl.e.TTL }

// Base is the cluster's node path.
func (cl *Cluster) Base() string { return cl.base }

// Admin is a connection with firn's credentials, for reading and writing
// the cluster's nodes directly.
func (cl *Cluster) Admin() *zk.Conn { return cl.admin }

// Expire implements coordtest.Cluster: the lease's session is closed from
// outside with its own credentials (learned from the handshake), which
// deletes its owner nodes at once.
func (cl *Cluster) Expire(t testing.TB, l coordinator.Lease) {
	t.Helper()
	id, ok := zookeeper.SessionOf(l)
	if !ok {
		t.Fatalf("zktest: Expire: %T is not a ZooKeeper lease", l)
	}
	s, ok := cl.b.lookup(id)
	if !ok {
		t.Fatalf("zktest: Expire: session %#x was not established through a Recorder", id)
	}
	var err error
	for _, addr := range cl.e.Servers {
		if err = ExpireSession(addr, s, 5*time.Second); err == nil {
			return
		}
	}
	t.Fatalf("zktest: Expire session %#x: %v", id, err)
}

// Kill implements coordtest.Cluster.
func (cl *Cluster) Kill(t testing.TB, c coordinator.Coordinator) {
	t.Helper()
	zc, ok := c.(*zookeeper.Coordinator)
	if !ok {
		t.Fatalf("zktest: Kill: %T is not a ZooKeeper coordinator", c)
	}
	zc.Abandon()
}

func (cl *Cluster) reservedPath(generator string, slot coordinator.Slot) string {
	return fmt.Sprintf("%s/%s/reserved/%d-%d", cl.base, generator, slot.Datacenter, slot.Worker)
}

// ACL is the ACL of the nodes the cluster's coordinators create: all
// permissions to its digest credentials alone.
func (cl *Cluster) ACL() []zk.ACL {
	u, pw := authParts(cl.e.Auth)
	return zk.DigestACL(zk.PermAll, u, pw)
}

// SetReserved implements coordtest.Cluster.
func (cl *Cluster) SetReserved(t testing.TB, generator string, slot coordinator.Slot, r int64) {
	t.Helper()
	p := cl.reservedPath(generator, slot)
	v := []byte(fmt.Sprint(r))
	if _, err := cl.admin.Set(p, v, -1); errors.Is(err, zk.ErrNoNode) {
		_, err = cl.admin.Create(p, v, 0, cl.ACL())
		if err != nil {
			t.Fatalf("zktest: create %s: %v", p, err)
		}
	} else if err != nil {
		t.Fatalf("zktest: set %s: %v", p, err)
	}
}

// SetDefinitionRecord implements coordtest.Cluster.
func (cl *Cluster) SetDefinitionRecord(t testing.TB, generator string, rec []byte) {
	t.Helper()
	p := cl.base + "/" + generator + "/definition"
	if _, err := cl.admin.Set(p, rec, -1); err != nil {
		t.Fatalf("zktest: set %s: %v", p, err)
	}
}

// Reserved implements coordtest.Cluster.
func (cl *Cluster) Reserved(t testing.TB, generator string, slot coordinator.Slot) int64 {
	t.Helper()
	p := cl.reservedPath(generator, slot)
	// A read is served by the server the admin session is on, which may
	// not have applied another session's write yet: sync first, so the
	// value read is at least as new as every write acknowledged before.
	if _, err := cl.admin.Sync(p); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("zktest: sync %s: %v", p, err)
	}
	d, _, err := cl.admin.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return -1
	}
	if err != nil {
		t.Fatalf("zktest: get %s: %v", p, err)
	}
	var v int64
	if _, err := fmt.Sscan(string(d), &v); err != nil {
		t.Fatalf("zktest: %s holds %q", p, d)
	}
	return v
}

// Revision implements coordtest.Cluster: the servers' largest zxid.
func (cl *Cluster) Revision(t testing.TB) int64 {
	t.Helper()
	z, err := Zxid(cl.e.Servers)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func authParts(auth string) (string, string) {
	u, p, _ := strings.Cut(auth, ":")
	return u, p
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// AdminConn opens a plain client connection (with digest credentials
// auth, when not empty) and waits for its session. It is closed at tb's
// cleanup.
func AdminConn(tb testing.TB, servers []string, auth string) *zk.Conn {
	tb.Helper()
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(quietLogger{}), zk.WithDialer(net.DialTimeout))
	if err != nil {
		tb.Fatalf("zktest: connect %v: %v", servers, err)
	}
	tb.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			tb.Fatalf("zktest: no session with %v (state %v)", servers, c.State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if auth != "" {
		if err := c.AddAuth("digest", []byte(auth)); err != nil {
			tb.Fatalf("zktest: digest auth: %v", err)
		}
	}
	return c
}

package etcd_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// testTTL is the lease TTL of the harness's coordinators: short, so the
// frozen-holder cases wait little, yet well above keepalive jitter.
const testTTL = 3 * time.Second

func TestMain(m *testing.M) { coordtest.Main(m, &etcdtest.Backend{}) }

// embeddedBackend starts one in-process member for t.
func embeddedBackend(t *testing.T) *etcdtest.Backend {
	srv := etcdtest.StartEmbedded(t)
	b := &etcdtest.Backend{Endpoints: srv.Endpoints, TTL: testTTL}
	t.Cleanup(b.Close)
	return b
}

// TestHarness runs the shared cases on an embedded single member.
func TestHarness(t *testing.T) { coordtest.Run(t, embeddedBackend(t)) }

// TestHarnessCluster runs the shared cases on a 3-member cluster of
// Debian's etcd binary.
func TestHarnessCluster(t *testing.T) {
	p := etcdtest.StartCluster(t, 3)
	b := &etcdtest.Backend{Endpoints: p.Endpoints(), TTL: testTTL}
	t.Cleanup(b.Close)
	coordtest.Run(t, b)
}

func TestFenceReacquire(t *testing.T) { coordtest.FenceReacquire(t, embeddedBackend(t)) }

func TestFenceCounter(t *testing.T) { coordtest.FenceCounter(t, embeddedBackend(t)) }

func TestFenceTakeBackFrozen(t *testing.T) { coordtest.FenceTakeBackFrozen(t, embeddedBackend(t)) }

// TestFenceTakeBackFrozenCluster runs the take-back fence on the 3-member
// cluster of processes.
func TestFenceTakeBackFrozenCluster(t *testing.T) {
	p := etcdtest.StartCluster(t, 3)
	b := &etcdtest.Backend{Endpoints: p.Endpoints(), TTL: testTTL}
	t.Cleanup(b.Close)
	coordtest.FenceTakeBackFrozen(t, b)
}

// TestDecisive: no ID repeats while holders churn their leases with a
// 200 ms reservation window, on an embedded member and on a 3-member
// cluster of processes.
func TestDecisive(t *testing.T) {
	coordtest.Decisive(t, embeddedBackend(t), coordtest.DecisiveOptions{})
}

func TestDecisiveCluster(t *testing.T) {
	p := etcdtest.StartCluster(t, 3)
	b := &etcdtest.Backend{Endpoints: p.Endpoints(), TTL: testTTL}
	t.Cleanup(b.Close)
	coordtest.Decisive(t, b, coordtest.DecisiveOptions{})
}

// benchBackends are the real servers the benchmarks run against.
func benchBackends(b *testing.B) map[string]*etcdtest.Backend {
	emb := etcdtest.StartEmbedded(b)
	p := etcdtest.StartCluster(b, 3)
	be := map[string]*etcdtest.Backend{
		"embedded": {Endpoints: emb.Endpoints, TTL: testTTL},
		"cluster3": {Endpoints: p.Endpoints(), TTL: testTTL},
	}
	for _, x := range be {
		b.Cleanup(x.Close)
	}
	return be
}

func BenchmarkAcquire(b *testing.B) {
	for name, be := range benchBackends(b) {
		b.Run(name, func(b *testing.B) { coordtest.BenchAcquire(b, be) })
	}
}

func BenchmarkReserve(b *testing.B) {
	for name, be := range benchBackends(b) {
		b.Run(name, func(b *testing.B) { coordtest.BenchReserve(b, be) })
	}
}

// BenchmarkWrites: coordinator writes per second per generator (etcd
// revision delta), idle and at full load, on the 3-member cluster
// (coordtest.BenchWrites). Run with -benchtime 1x.
func BenchmarkWrites(b *testing.B) {
	p := etcdtest.StartCluster(b, 3)
	be := &etcdtest.Backend{Endpoints: p.Endpoints(), TTL: testTTL}
	b.Cleanup(be.Close)
	coordtest.BenchWrites(b, be)
}

func newCoord(t *testing.T, cfg etcd.Config) *etcd.Coordinator {
	t.Helper()
	c, err := etcd.New(cfg)
	if err != nil {
		t.Fatalf("etcd.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func baseConfig(endpoints []string) etcd.Config {
	cfg := etcd.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.Clock = clockguard.NewSystem()
	cfg.Cluster = "secure"
	return cfg
}

// TestSecure: TLS with a client certificate plus username/password works;
// a wrong password, no TLS, no client certificate, or a server certificate
// of another CA is refused.
func TestSecure(t *testing.T) {
	p := etcdtest.StartSecure(t)
	cfg := baseConfig(p.Endpoints())
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = p.Certs.CA, p.Certs.ClientCert, p.Certs.ClientKey
	cfg.Username, cfg.Password = p.User, p.Password
	c := newCoord(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := coordtest.Node("tls")
	l, err := c.Acquire(ctx, coordtest.Spec("gen", 4), n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctx, 42, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, 40); err != nil {
		t.Fatal(err)
	}

	bad := cfg
	bad.Password = "wrong"
	bad.DialTimeout = 3 * time.Second
	if _, err := etcd.New(bad); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password: %v, want an authentication failure", err)
	}
	noAuth := cfg
	noAuth.Username, noAuth.Password = "", ""
	if c2, err := etcd.New(noAuth); err == nil {
		_, err = c2.Acquire(ctx, coordtest.Spec("gen", 4), coordtest.Node("anon"))
		c2.Close()
		if err == nil {
			t.Fatal("acquire without credentials succeeded with auth enabled")
		}
	}
	noCert := cfg
	noCert.CertFile, noCert.KeyFile = "", ""
	noCert.DialTimeout = 3 * time.Second
	if c3, err := etcd.New(noCert); err == nil {
		c3.Close()
		t.Fatal("connected without a client certificate to a server requiring one")
	}
	// A server whose certificate another CA signed is refused: the
	// reloadable CA bundle verifies the server itself.
	stranger := etcdtest.MakeCerts(t, "stranger")
	otherCA := cfg
	otherCA.CAFile = stranger.CA
	otherCA.DialTimeout = 3 * time.Second
	if c5, err := etcd.New(otherCA); err == nil {
		c5.Close()
		t.Fatal("connected to a server whose certificate the CA file does not vouch for")
	}
	plain := cfg
	plain.CAFile, plain.CertFile, plain.KeyFile = "", "", ""
	plain.Endpoints = []string{strings.Replace(p.Endpoints()[0], "https://", "http://", 1)}
	plain.DialTimeout = 3 * time.Second
	if c4, err := etcd.New(plain); err == nil {
		c4.Close()
		t.Fatal("connected in plain text to a TLS-only server")
	}
}

// TestFrozenMemberFailover: with one member of three frozen by SIGSTOP,
// a Reserve fails at most for a call timeout or two and then succeeds on
// another member, within the reservation window (RECIPES FAILED 2).
//
// The lease TTL is longer than any freeze here. etcd before 3.4.28 and
// 3.5.11 (Debian ships 3.4.23) has a bug, etcd-io/etcd#15247: a leader
// frozen for longer than a lease's TTL still believes it leads when it is
// thawed, finds the lease expired by its own stale clock, and its revoke
// is forwarded to the new leader and committed — though the client renewed
// the lease on the new leader all along. firn fails closed there (the
// next fenced write finds the owner key gone and the lease is lost;
// docs/coordination.md names the versions to run), but that is etcd's
// availability, not the failover this test measures; with the freeze
// inside the TTL the stale leader has nothing to revoke.
func TestFrozenMemberFailover(t *testing.T) {
	p := etcdtest.StartCluster(t, 3)
	cfg := baseConfig(p.Endpoints())
	cfg.Cluster = "failover"
	cfg.Timing.LeaseTTL = 30 * time.Second
	c := newCoord(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := coordtest.Node("f")
	l, err := c.Acquire(ctx, coordtest.Spec("gen", 4), n)
	if err != nil {
		t.Fatal(err)
	}
	// The availability property: the longest stretch without an
	// acknowledged reservation stays below the window, so a generator
	// never runs out of reserved time while one member is frozen.
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range p.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("=== %s log:\n%s", m.Name, b)
			}
		}
	})
	for i, m := range p.Members {
		t.Logf("freezing %s", m.Name)
		m.Freeze(t)
		froze := time.Now()
		failed := 0
		var longest time.Duration
		last := time.Now()
		for j := 0; j < 8; j++ {
			err := l.Reserve(ctx, int64(100*(i+1)+j), coordtest.Beat(n))
			switch {
			case err == nil:
				longest = max(longest, time.Since(last))
				last = time.Now()
			case errors.Is(err, coordinator.ErrUnavailable):
				failed++
			default:
				t.Fatalf("member %s frozen: Reserve: %v", m.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		longest = max(longest, time.Since(last))
		frozen := time.Since(froze)
		m.Thaw(t)
		if frozen >= cfg.Timing.LeaseTTL {
			t.Fatalf("member %s was frozen %v, not within the lease TTL %v the test relies on", m.Name, frozen, cfg.Timing.LeaseTTL)
		}
		// One member at a time: the next freeze waits until this one has
		// rejoined, as an operator's rolling fault would.
		p.WaitCaughtUp(t)
		t.Logf("member %s frozen: %d of 8 Reserve calls failed, longest stretch without an ack %v", m.Name, failed, longest)
		if longest >= cfg.Timing.ReservationWindow {
			t.Fatalf("member %s frozen: %v without an acknowledged reservation, window %v", m.Name, longest, cfg.Timing.ReservationWindow)
		}
	}
}

// TestPinSchemaTooNew: a pin written by a newer schema is refused.
func TestPinSchemaTooNew(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	cfg := baseConfig(srv.Endpoints)
	cfg.Cluster = "schema"
	c := newCoord(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pin := c.Root() + "newer/pin"
	if _, err := c.Client().Put(ctx, pin, `{"layout":"x","datacenter":-1,"incarnation":"abc","schema":99}`); err != nil {
		t.Fatal(err)
	}
	spec := coordtest.Spec("newer", 4)
	spec.Layout = "x"
	_, err := c.Acquire(ctx, spec, coordtest.Node("a"))
	if !errors.Is(err, coordinator.ErrSchemaTooNew) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("pin schema 99: %v, want ErrSchemaTooNew naming 99", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := baseConfig([]string{"127.0.0.1:1"})
	if err := good.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*etcd.Config)
		want string
	}{
		{"no endpoints", func(c *etcd.Config) { c.Endpoints = nil }, "endpoints"},
		{"no clock", func(c *etcd.Config) { c.Clock = nil }, "Clock"},
		{"bad cluster", func(c *etcd.Config) { c.Cluster = "a/b" }, "cluster"},
		{"cert without key", func(c *etcd.Config) { c.CertFile = "x.pem" }, "key"},
		{"short ttl", func(c *etcd.Config) { c.Timing.LeaseTTL = time.Second }, "lease TTL"},
		{"window too short", func(c *etcd.Config) { c.Timing.ReservationWindow = 3 * time.Second }, "2 × coordinator timeout"},
		{"timeout vs window", func(c *etcd.Config) { c.Timing.Timeout = 2 * time.Second }, "shorter than"},
	} {
		c := good
		tc.mod(&c)
		err := c.Validate()
		if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec naming %q", tc.name, err, tc.want)
		}
	}
	short := good
	short.Timing.ReservationWindow = 200 * time.Millisecond
	short.Timing.AllowShortWindow = true
	if err := short.Validate(); err != nil {
		t.Errorf("short window with the test-only lift: %v", err)
	}
}

// hangGrants makes every LeaseGrant wait until its context ends while
// hang is set: a member that does not answer (frozen, partitioned).
func hangGrants(hang *atomic.Bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if hang.Load() && strings.HasSuffix(method, "/LeaseGrant") {
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// TestAcquireHonoursDeadlineWhileGrantHangs: an Acquire returns by its
// caller's deadline, even while another Acquire of the same coordinator
// waits on an unanswered lease grant. Session grants are serialised, and
// the lock was a mutex held across the Grant RPC: a caller with a 300 ms
// deadline waited out the other's grant timeout (2 s here) behind it.
func TestAcquireHonoursDeadlineWhileGrantHangs(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	var hang atomic.Bool
	cfg := etcd.WithDialOptions(quietConfig(srv.Endpoints, "grant-hang"), grpc.WithChainUnaryInterceptor(hangGrants(&hang)))
	cfg.Timing.Timeout = 2 * time.Second
	cfg.Timing.ReservationWindow = 6 * time.Second
	c := newCoord(t, cfg)
	spec := coordtest.Spec("gen", 4)
	hang.Store(true)

	// A patient caller (a holder with the usual 4 × timeout) starts first.
	actx, acancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer acancel()
	aDone := make(chan error, 1)
	go func() {
		_, err := c.Acquire(actx, spec, coordtest.Node("a"))
		aDone <- err
	}()
	time.Sleep(200 * time.Millisecond) // a is inside its Grant now

	const deadline = 300 * time.Millisecond
	bctx, bcancel := context.WithTimeout(context.Background(), deadline)
	defer bcancel()
	start := time.Now()
	_, err := c.Acquire(bctx, spec, coordtest.Node("b"))
	took := time.Since(start)
	if !errors.Is(err, coordinator.ErrUnavailable) {
		t.Errorf("b: got %v, want an error matching ErrUnavailable", err)
	}
	if took > deadline+300*time.Millisecond {
		t.Errorf("b: Acquire with a %v deadline returned after %v (waited on another caller's lease grant): %v",
			deadline, took.Round(time.Millisecond), err)
	}
	hang.Store(false)
	acancel()
	<-aDone
}

package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// quiet logs warnings and errors only: the cases make thousands of
// acquisitions.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// Backend runs the coordtest cases on an etcd reached at Endpoints. Every
// NewCluster is a fresh cluster name under Prefix.
type Backend struct {
	Endpoints []string
	// Prefix defaults to "firn".
	Prefix string
	// TTL of the leases of coordinators from Connect and Dial; default 2 s.
	TTL time.Duration
	// Certs and User/Password, when set, are used by every client.
	Certs          *Certs
	User, Password string

	adminOnce sync.Once
	admin     *clientv3.Client
	adminErr  error
}

var _ coordtest.Backend = (*Backend)(nil)

// Name implements coordtest.Backend.
func (b *Backend) Name() string { return "etcd" }

// endpoint is what a child process needs to dial.
type endpoint struct {
	Endpoints []string      `json:"endpoints"`
	Prefix    string        `json:"prefix"`
	Cluster   string        `json:"cluster"`
	TTL       time.Duration `json:"ttl"`
	CA        string        `json:"ca,omitempty"`
	Cert      string        `json:"cert,omitempty"`
	Key       string        `json:"key,omitempty"`
	User      string        `json:"user,omitempty"`
	Password  string        `json:"password,omitempty"`
}

func (b *Backend) prefix() string {
	if b.Prefix == "" {
		return "firn"
	}
	return b.Prefix
}

func (b *Backend) ttl() time.Duration {
	if b.TTL == 0 {
		return 2 * time.Second
	}
	return b.TTL
}

// Config is the etcd configuration for endpoint e with clock.
func (e endpoint) config(clock clockguard.Clock) etcd.Config {
	cfg := etcd.DefaultConfig()
	cfg.Endpoints, cfg.Prefix, cfg.Cluster, cfg.Clock = e.Endpoints, e.Prefix, e.Cluster, clock
	cfg.Timing.LeaseTTL = e.TTL
	cfg.Timing.AllowShortWindow = true
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = e.CA, e.Cert, e.Key
	cfg.Username, cfg.Password = e.User, e.Password
	cfg.Logger = quiet
	return cfg
}

// Dial implements coordtest.Backend.
func (b *Backend) Dial(ep string, clock clockguard.Clock) (coordinator.Coordinator, error) {
	var e endpoint
	if err := json.Unmarshal([]byte(ep), &e); err != nil {
		return nil, fmt.Errorf("etcdtest: endpoint %q: %w", ep, err)
	}
	return etcd.New(e.config(clock))
}

func (b *Backend) adminClient(t testing.TB) *clientv3.Client {
	b.adminOnce.Do(func() {
		cfg := clientv3.Config{
			Endpoints: b.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			Username: b.User, Password: b.Password,
			DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		}
		if b.Certs != nil {
			cfg.TLS = b.Certs.ClientTLS(t)
		}
		b.admin, b.adminErr = clientv3.New(cfg)
	})
	if b.adminErr != nil {
		t.Fatalf("etcdtest: admin client: %v", b.adminErr)
	}
	return b.admin
}

// Close closes the admin client.
func (b *Backend) Close() {
	if b.admin != nil {
		b.admin.Close()
	}
}

// NewCluster implements coordtest.Backend.
func (b *Backend) NewCluster(t testing.TB) coordtest.Cluster {
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	e := endpoint{Endpoints: b.Endpoints, Prefix: b.prefix(), Cluster: name + "-" + hex.EncodeToString(r[:]), TTL: b.ttl(),
		User: b.User, Password: b.Password}
	if b.Certs != nil {
		e.CA, e.Cert, e.Key = b.Certs.CA, b.Certs.ClientCert, b.Certs.ClientKey
	}
	return &cluster{b: b, e: e, admin: b.adminClient(t)}
}

type cluster struct {
	b     *Backend
	e     endpoint
	admin *clientv3.Client
}

func (c *cluster) root() string { return "/" + c.e.Prefix + "/" + c.e.Cluster + "/" }

// Config returns the configuration Connect uses, for tests that want to
// change it before calling etcd.New themselves.
func (c *cluster) Config(clock clockguard.Clock) etcd.Config { return c.e.config(clock) }

func (c *cluster) Connect(t testing.TB, clock clockguard.Clock) coordinator.Backend {
	t.Helper()
	co, err := etcd.New(c.e.config(clock))
	if err != nil {
		t.Fatalf("etcdtest: connect: %v", err)
	}
	t.Cleanup(func() { co.Close() })
	return co
}

func (c *cluster) Endpoint() string {
	b, _ := json.Marshal(c.e)
	return string(b)
}

func (c *cluster) TTL() time.Duration { return c.e.TTL }

func (c *cluster) Expire(t testing.TB, l coordinator.Lease) {
	t.Helper()
	id, ok := etcd.LeaseID(l)
	if !ok {
		t.Fatalf("etcdtest: Expire: %T is not an etcd lease", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.admin.Revoke(ctx, id); err != nil && !strings.Contains(err.Error(), "lease not found") {
		t.Fatalf("etcdtest: revoke %x: %v", int64(id), err)
	}
}

func (c *cluster) Kill(t testing.TB, co coordinator.Coordinator) {
	t.Helper()
	ec, ok := co.(*etcd.Coordinator)
	if !ok {
		t.Fatalf("etcdtest: Kill: %T is not an etcd coordinator", co)
	}
	ec.Abandon()
}

func (c *cluster) SetReserved(t testing.TB, generator string, slot coordinator.Slot, r int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.admin.Put(ctx, etcd.ReservedKey(c.root(), generator, slot), etcd.EncodeReserved(r)); err != nil {
		t.Fatalf("etcdtest: SetReserved: %v", err)
	}
}

func (c *cluster) Reserved(t testing.TB, generator string, slot coordinator.Slot) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := c.admin.Get(ctx, etcd.ReservedKey(c.root(), generator, slot))
	if err != nil {
		t.Fatalf("etcdtest: Reserved: %v", err)
	}
	if len(g.Kvs) == 0 {
		return -1
	}
	v, err := etcd.DecodeReserved(g.Kvs[0].Value)
	if err != nil {
		t.Fatalf("etcdtest: Reserved: %v", err)
	}
	return v
}

func (c *cluster) SetDefinitionRecord(t testing.TB, generator string, rec []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.admin.Put(ctx, c.root()+generator+"/definition", string(rec)); err != nil {
		t.Fatalf("etcdtest: SetDefinitionRecord: %v", err)
	}
}

func (c *cluster) Revision(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := c.admin.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcdtest: Revision: %v", err)
	}
	return g.Header.Revision
}

package embedded_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/embedded"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

func TestMain(m *testing.M) { coordtest.Main(m, &etcdtest.Backend{}) }

func start(t *testing.T, cfg embedded.Config) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("embedded.Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHarnessEmbedded runs every shared case on the embedded default.
func TestHarnessEmbedded(t *testing.T) {
	s := start(t, embedded.Config{DataDir: t.TempDir()})
	if !strings.HasPrefix(s.ClientURL(), "http://127.0.0.1:") {
		t.Fatalf("client URL %q is not loopback", s.ClientURL())
	}
	b := &etcdtest.Backend{Endpoints: s.Endpoints(), TTL: 3 * time.Second}
	t.Cleanup(b.Close)
	coordtest.Run(t, b)
}

// TestDecisiveEmbedded: the decisive check on the embedded default.
func TestDecisiveEmbedded(t *testing.T) {
	s := start(t, embedded.Config{DataDir: t.TempDir()})
	b := &etcdtest.Backend{Endpoints: s.Endpoints(), TTL: 3 * time.Second}
	t.Cleanup(b.Close)
	coordtest.Decisive(t, b, coordtest.DecisiveOptions{})
}

func connect(t *testing.T, s *embedded.Server) *etcd.Coordinator {
	t.Helper()
	cfg := etcd.DefaultConfig()
	cfg.Endpoints, cfg.Clock = s.Endpoints(), clockguard.NewSystem()
	c, err := etcd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStateSurvivesRestart: pins, reservations and the client URL survive
// a restart of the embedded member on the same data dir.
func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url, inst := s.ClientURL(), s.InstanceID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := connect(t, s)
	n := coordtest.Node("emb")
	n.InstanceID = inst
	l, err := c.Acquire(ctx, coordtest.Spec("g", 4), n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctx, 1234, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	incarnation := l.Incarnation()
	c.Abandon()
	s.Close()

	s2 := start(t, embedded.Config{DataDir: dir})
	if s2.ClientURL() != url || s2.InstanceID() != inst {
		t.Fatalf("after restart URL %q instance %q, want %q %q", s2.ClientURL(), s2.InstanceID(), url, inst)
	}
	c2 := connect(t, s2)
	defer c2.Close()
	hs, err := c2.Workers(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Reserved != 1234 {
		t.Fatalf("after restart Workers = %+v, want one slot reserved at 1234", hs)
	}
	spec := coordtest.Spec("g", 4)
	other := coordtest.Node("other")
	l2, err := c2.Acquire(ctx, spec, other)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Incarnation() != incarnation {
		t.Fatalf("incarnation %q after restart, want %q", l2.Incarnation(), incarnation)
	}
}

// TestMovedRefused: a data dir moved to another path, or seen from another
// machine, is refused with reason "data dir copied or moved" unless
// accepted.
func TestMovedRefused(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a")
	s, err := embedded.Start(embedded.Config{DataDir: dir, MachineID: func() (string, error) { return "m-1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	_, err = embedded.Start(embedded.Config{DataDir: dir, MachineID: func() (string, error) { return "m-2", nil }})
	var me *embedded.MovedError
	if !errors.As(err, &me) || !errors.Is(err, embedded.ErrMoved) || me.Field != "machine ID" ||
		!strings.Contains(err.Error(), "data dir copied or moved") {
		t.Fatalf("other machine: %v, want data dir copied or moved (machine ID)", err)
	}

	moved := filepath.Join(base, "b")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	_, err = embedded.Start(embedded.Config{DataDir: moved, MachineID: func() (string, error) { return "m-1", nil }})
	if !errors.As(err, &me) || me.Field != "data dir path" {
		t.Fatalf("moved dir: %v, want data dir copied or moved (data dir path)", err)
	}
	s2, err := embedded.Start(embedded.Config{DataDir: moved, AcceptMoved: true, MachineID: func() (string, error) { return "m-1", nil }})
	if err != nil {
		t.Fatalf("accepted move: %v", err)
	}
	s2.Close()
	// Accepting records the new place: a plain start now works.
	s3 := start(t, embedded.Config{DataDir: moved, MachineID: func() (string, error) { return "m-1", nil }})
	_ = s3
}

func TestLoopbackOnly(t *testing.T) {
	_, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), ClientAddr: "0.0.0.0:0"})
	if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("non-loopback client address: %v, want ErrInvalidSpec naming loopback", err)
	}
}

// TestIdleTimingKeepsLeasesAndWrites: the embedded member's slower raft tick
// and backend commit interval keep etcd's minimum lease TTL at firn's
// lowest --lease-ttl (a 2 s lease is granted as 2 s, not raised), and a
// write acknowledged just before Close is there after a restart (the WAL
// makes it durable, not the backend commit).
func TestIdleTimingKeepsLeasesAndWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 {
		t.Errorf("Grant(2) got TTL %d: the member's minimum lease TTL is above 2s", g.TTL)
	}
	if _, err := cli.Put(ctx, "/idle-timing", "acknowledged"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = start(t, embedded.Config{DataDir: dir})
	cli, err = clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(ctx, "/idle-timing")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "acknowledged" {
		t.Fatalf("after restart: %v, want the acknowledged write", r.Kvs)
	}
}

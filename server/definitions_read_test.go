package server_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// TestDefinitionUnreadableHoldsItsGeneratorAlone: a definition record the
// node cannot read (schema 2, as a newer binary writes) affects its own
// generator alone. A node started then applies every other definition — a
// retired generator on its flags is refused NOT_FOUND, a flag that
// disagrees with a stored definition stops the start — and holds the
// generator of the unreadable record, refusing it (Decode too: its allow
// list cannot be checked) naming the record, without taking a worker for
// it. A running generator whose record turns unreadable is held likewise
// and serves again once it reads; generators created meanwhile start.
func TestDefinitionUnreadableHoldsItsGeneratorAlone(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	admin := startNamedNode(t, "admin", e.Endpoints, t.TempDir())
	defs := admin.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "legacy", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := defs.RetireDefinition(ctx(t), "legacy", "gone for good", time.Now()); err != nil {
		t.Fatal(err)
	}
	cli := etcdClient(t, e.Endpoints)
	root := admin.coord.(*etcd.Coordinator).Root()
	future := `{"name":"future","definition":"snowflake","created":"2026-01-01T00:00:00Z","schema":2}`
	if _, err := cli.Put(context.Background(), root+"future/definition", future); err != nil {
		t.Fatal(err)
	}
	ds, err := defs.Definitions(ctx(t))
	readable, bad, err := coordinator.SplitDefinitions(ds, err)
	if err != nil || len(readable) != 1 || readable[0].Name != "legacy" || len(bad) != 1 || bad[0].Name != "future" ||
		bad[0].Where != root+"future/definition" || !errors.Is(bad[0].Err, coordinator.ErrSchemaTooNew) {
		t.Fatalf("Definitions with one record of schema 2: %+v, unreadable %+v, %v; want legacy read and future named", readable, bad, err)
	}

	n := startNamedNode(t, "late", e.Endpoints, t.TempDir(), generators("default=snowflake", "legacy=snowflake", "future=snowflake"))
	waitServing(t, n.ids, "", 15*time.Second)
	_, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "legacy"})
	wantCode(t, "NextID of a generator retired, with another record unreadable", err, codes.NotFound, "retired", "gone for good")
	_, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "future"})
	wantCode(t, "NextID of the generator whose record does not read", err, codes.Unavailable, `"future"`, root+"future/definition", "schema 2")
	_, err = n.ids.Decode(ctx(t), &firnv1.DecodeRequest{Generator: "future", Id: 1 << 30})
	wantCode(t, "Decode of the generator whose record does not read", err, codes.Unavailable, root+"future/definition")
	if g := n.genInfo(t, "future"); g.GetServing() || g.GetCause() != string(clockguard.CodeCoordinatorUnavailable) ||
		!strings.Contains(g.GetReason(), "schema 2") {
		t.Fatalf("Info of future: serving %v, cause %s, reason %q; want held naming its record", g.GetServing(), g.GetCause(), g.GetReason())
	}
	if resp, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "future"}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health of future: %v %v, want NOT_SERVING", resp.GetStatus(), err)
	}
	noLiveWorker(t, admin, "future")

	// A flag that disagrees with a readable definition stops the start.
	_, err = startNodeOver(t, "disagrees", e.Endpoints, t.TempDir(), nil, generators("default=snowflake", "legacy=compact"))
	if !errors.Is(err, core.ErrConfig) || !strings.Contains(err.Error(), "--generator legacy=") || !strings.Contains(err.Error(), "the coordinator's snowflake") {
		t.Fatalf("start of a node whose flag disagrees with the stored definition: %v, want the disagreement naming legacy", err)
	}

	// A running generator whose record turns unreadable: held, naming it;
	// readable again: it serves on. One created meanwhile starts.
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitListedServing(t, n.ids, "msg", 10*time.Second)
	g, err := cli.Get(context.Background(), root+"msg/definition")
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("read msg's record: %v", err)
	}
	stored := g.Kvs[0].Value
	if _, err := cli.Put(context.Background(), root+"msg/definition", strings.Replace(string(stored), `"schema":1`, `"schema":2`, 1)); err != nil {
		t.Fatal(err)
	}
	waitNotServing(t, n.ids, "msg", 5*time.Second)
	_, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"})
	wantCode(t, "NextID of a running generator whose record turned unreadable", err, codes.Unavailable, root+"msg/definition", "schema 2")
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "later", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitListedServing(t, n.ids, "later", 10*time.Second)
	if _, err := cli.Put(context.Background(), root+"msg/definition", string(stored)); err != nil {
		t.Fatal(err)
	}
	waitServing(t, n.ids, "msg", 5*time.Second)
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("the default generator: %v", err)
	}
	if !strings.Contains(n.logs.String(), "future/definition") {
		t.Fatalf("the node did not log the unreadable record")
	}
}

// TestDefinitionsUnreadAtStartHoldEveryGenerator: a node that cannot
// read the definitions when it starts starts none of its generators —
// each waits STARTING, naming the read's error, and takes no worker (a
// generator it starts could pin a definition other than the stored
// one) — and starts them at the first read that goes through. A flag
// found then to disagree with the stored definition holds that generator
// alone, naming both, and it is not started; every generator created
// later starts. A read failing after that keeps the last one.
func TestDefinitionsUnreadAtStartHoldEveryGenerator(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	admin := startNamedNode(t, "admin", e.Endpoints, t.TempDir())
	defs := admin.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitListedServing(t, admin.ids, "msg", 10*time.Second)
	var fd *failingDefinitions
	n, err := startNodeOver(t, "waits", e.Endpoints, t.TempDir(), func(c *etcd.Coordinator) coordinator.Coordinator {
		fd = &failingDefinitions{Coordinator: c}
		fd.fail(errors.New("injected: etcd unreachable"))
		return fd
	}, generators("default=snowflake", "msg=compact", "solo=snowflake"))
	if err != nil {
		t.Fatalf("start while the definitions cannot be read: %v", err)
	}
	time.Sleep(3 * time.Second) // a read tried again, and failed
	for _, gen := range []string{"", "msg", "solo"} {
		g := n.genInfo(t, gen)
		if g.GetServing() || g.GetCause() != string(clockguard.CodeStarting) ||
			!strings.Contains(g.GetReason(), "reading the generators' definitions: ") || !strings.Contains(g.GetReason(), "injected") {
			t.Fatalf("generator %q before the definitions read: serving %v, cause %s, reason %q; want STARTING naming the read",
				gen, g.GetServing(), g.GetCause(), g.GetReason())
		}
	}
	_, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	wantCode(t, "NextID before the definitions read", err, codes.Unavailable, "reading the generators' definitions", "injected")
	noLiveWorker(t, admin, "solo")
	if gs, err := admin.coord.(coordinator.Admin).Generators(ctx(t)); err != nil {
		t.Fatal(err)
	} else {
		for _, g := range gs {
			if g.Name == "solo" && g.Pin.Layout != "" {
				t.Fatalf("solo pinned to %s before its node read the definitions", g.Pin.Layout)
			}
		}
	}

	fd.fail(nil)
	waitServing(t, n.ids, "", 10*time.Second)
	waitServing(t, n.ids, "solo", 5*time.Second)
	g := n.genInfo(t, "msg")
	if g.GetServing() || !strings.Contains(g.GetReason(), "--generator msg=") || !strings.Contains(g.GetReason(), "the coordinator's snowflake") {
		t.Fatalf("msg, its flag disagreeing with the stored definition: serving %v, reason %q; want held naming both", g.GetServing(), g.GetReason())
	}
	_, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"})
	wantCode(t, "NextID of a generator whose flag disagrees with its stored definition", err, codes.Unavailable, "disagree", "--generator msg=", "the coordinator's snowflake")
	if _, err := admin.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"}); err != nil {
		t.Fatalf("msg on the node that follows its stored definition: %v", err)
	}
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "later", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitListedServing(t, n.ids, "later", 10*time.Second)

	// An outage after that keeps the last read: everything serves on.
	fd.fail(errors.New("injected: etcd unreachable again"))
	time.Sleep(5 * time.Second)
	for _, gen := range []string{"", "solo", "later"} {
		if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: gen}); err != nil {
			t.Fatalf("generator %q while the definitions cannot be read after a read: %v", gen, err)
		}
	}
	if !strings.Contains(n.logs.String(), "keeping the last read") {
		t.Fatalf("the node did not log the failing read")
	}
}

// TestDefinitionStoredLaterDisagreeingHoldsItsGeneratorAlone: a definition
// stored while a node serves the same name from another flag holds that
// generator on the node, naming the disagreement (and logs it), while its
// other generators, and those created later, serve.
func TestDefinitionStoredLaterDisagreeingHoldsItsGeneratorAlone(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNamedNode(t, "n", e.Endpoints, t.TempDir(), generators("default=snowflake", "msg=compact"))
	waitServing(t, n.ids, "msg", 15*time.Second)
	defs := n.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitNotServing(t, n.ids, "msg", 5*time.Second)
	_, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"})
	wantCode(t, "NextID of a generator whose stored definition disagrees", err, codes.Unavailable, "disagree", "--generator msg=", "the coordinator's snowflake")
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "later", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitListedServing(t, n.ids, "later", 10*time.Second)
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("the default generator: %v", err)
	}
	if logs := n.logs.String(); !strings.Contains(logs, "disagree") || !strings.Contains(logs, "--generator msg=") {
		t.Fatalf("the node did not log the disagreement")
	}
}

// failingDefinitions is an etcd coordinator whose Definitions fails with
// the error set (none: it reads).
type failingDefinitions struct {
	*etcd.Coordinator
	mu  sync.Mutex
	err error
}

func (f *failingDefinitions) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *failingDefinitions) Definitions(ctx context.Context) ([]coordinator.GeneratorDefinition, error) {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.Coordinator.Definitions(ctx)
}

// startNodeOver is startNamedNode over the coordinator wrap makes of the
// etcd one (nil: the etcd one), returning Start's error: nil and the
// node, or the error and no node.
func startNodeOver(t *testing.T, name string, endpoints []string, dir string, wrap func(*etcd.Coordinator) coordinator.Coordinator,
	opts ...func(*core.Config)) (*tnode, error) {
	t.Helper()
	cfg, err := nodeConfig(opts...)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	n := &tnode{t: t, cfg: cfg, dir: dir, logs: &logBuf{}}
	log := slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	clock := clockguard.NewSystem()
	ec := etcd.DefaultConfig()
	ec.Endpoints, ec.Cluster, ec.Timing, ec.Clock, ec.Logger = endpoints, cfg.Cluster, cfg.Timing, clock, log
	ecoord, err := etcd.New(ec)
	if err != nil {
		t.Fatalf("etcd coordinator: %v", err)
	}
	n.coord = ecoord
	if wrap != nil {
		n.coord = wrap(ecoord)
	}
	st, err := datadir.Open(dir)
	if err != nil {
		ecoord.Close()
		t.Fatalf("data dir: %v", err)
	}
	n.node, err = server.New(cfg, n.coord, st, clock, name, server.WithLogger(log))
	if err != nil {
		ecoord.Close()
		t.Fatalf("server.New: %v", err)
	}
	if err := n.node.Start(context.Background()); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = n.node.Shutdown(sctx)
		ecoord.Close()
		return nil, err
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("logs of node %s:\n%s", name, n.logs.String())
		}
	})
	n.conn = dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials())
	n.ids = firnv1.NewIDServiceClient(n.conn)
	n.health = healthpb.NewHealthClient(n.conn)
	return n, nil
}

// etcdClient is a client of the test's etcd, for writing records behind
// the nodes' backs.
func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// noLiveWorker fails if any node holds a worker of gen.
func noLiveWorker(t *testing.T, n *tnode, gen string) {
	t.Helper()
	slots, err := n.coord.(coordinator.Admin).Workers(ctx(t), gen)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.Live {
			t.Fatalf("generator %s: worker %v %s", gen, s.Slot, s.HolderName())
		}
	}
}

// waitListedServing waits until Info lists gen and it serves.
func waitListedServing(t *testing.T, cli firnv1.IDServiceClient, gen string, within time.Duration) {
	t.Helper()
	start := time.Now()
	for !listed(t, cli, gen) {
		if time.Since(start) > within {
			t.Fatalf("generator %q not listed within %v", gen, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitServing(t, cli, gen, within-time.Since(start))
}

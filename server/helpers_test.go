package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// logBuf collects a node's log lines; they are printed only when the test
// fails, so a node logging after its test's end cannot reach a finished t.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// nodeConfig is a node configuration for the tests: the defaults with
// loopback port-0 listeners, then each option in order, then Finish.
//
// Each test starts an etcd of its own, which nothing restores underneath
// its nodes: they run as on the embedded default (PrivateCoordinator),
// without the restore guard's wait at every take. The tests of the guard
// (TestRestoreGuard*) turn it off with sharedCoordinator, as does every
// test whose subject is a take on a shared coordinator. Most tests run one
// or two nodes without NTP and are not about the clock check either:
// --unchecked-clock-ok; those that are pass checkedClock.
func nodeConfig(opts ...func(*core.Config)) (core.Config, error) {
	cfg := core.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.PrivateCoordinator = true
	cfg.UncheckedClockOK = true
	for _, o := range opts {
		o(&cfg)
	}
	return cfg, cfg.Finish(wallNow())
}

// sharedCoordinator runs the node as on a coordinator other nodes share
// (and a restore could go back underneath): every take waits the restore
// guard.
func sharedCoordinator(c *core.Config) { c.PrivateCoordinator = false }

// generators sets the node's generators from name=layout specs (a preset
// or a canonical layout string); the first is the default.
func generators(specs ...string) func(*core.Config) {
	return func(c *core.Config) {
		c.Generators = nil
		for _, s := range specs {
			name, layout, _ := strings.Cut(s, "=")
			l, err := generator.ParseLayout(layout)
			if err != nil {
				panic(fmt.Sprintf("generators(%q): %v", s, err))
			}
			c.Generators = append(c.Generators, core.GeneratorConfig{Name: name, Layout: l})
		}
	}
}

// checkedClock runs the node as `firn serve` does on a shared coordinator
// by default: without --unchecked-clock-ok, it refuses to serve while
// nothing checks its clock (and every take waits the restore guard).
func checkedClock(c *core.Config) { c.UncheckedClockOK, c.PrivateCoordinator = false, false }

// faultInjection turns fault injection on, its listener on a free
// loopback port.
func faultInjection(c *core.Config) {
	c.EnableFaultInjection = true
	c.FaultAddr = "127.0.0.1:0"
}

// ntpServers points the node at NTP servers, checked every interval.
func ntpServers(interval time.Duration, addrs ...string) func(*core.Config) {
	return func(c *core.Config) {
		c.NTP = addrs
		c.NTPRequired = true
		c.NTPInterval = interval
	}
}

// tnode is one running node and its plaintext clients.
type tnode struct {
	t      *testing.T
	node   *server.Node
	cfg    core.Config
	dir    string
	coord  coordinator.Coordinator
	offset *clockguard.Offset
	logs   *logBuf

	conn   *grpc.ClientConn
	ids    firnv1.IDServiceClient
	health healthpb.HealthClient
	httpc  *http.Client
	base   string // http(s)://host:port of the HTTP listener

	stopOnce sync.Once
}

// startNode starts a node named after the test on the etcd endpoints with
// data dir dir and the configuration nodeConfig(opts...) builds. With TLS
// the clients are left unset: the test dials itself.
func startNode(t *testing.T, endpoints []string, dir string, opts ...func(*core.Config)) *tnode {
	t.Helper()
	return startNamedNode(t, "node-"+t.Name(), endpoints, dir, opts...)
}

// startNamedNode is startNode with the node's name.
func startNamedNode(t *testing.T, name string, endpoints []string, dir string, opts ...func(*core.Config)) *tnode {
	t.Helper()
	return startNodeOpts(t, name, endpoints, dir, nil, opts...)
}

// startNodeOpts starts a node named name on endpoints, with extra node
// options and config changes.
func startNodeOpts(t *testing.T, name string, endpoints []string, dir string, extra []server.Option, opts ...func(*core.Config)) *tnode {
	t.Helper()
	cfg, err := nodeConfig(opts...)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	n := &tnode{t: t, cfg: cfg, dir: dir, logs: &logBuf{}}
	log := slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))

	var clock clockguard.Clock = clockguard.NewSystem()
	nodeOpts := append([]server.Option{server.WithLogger(log)}, extra...)
	if cfg.EnableFaultInjection {
		n.offset = clockguard.NewOffset(clock, cfg.FaultClockOffset)
		clock = n.offset
		nodeOpts = append(nodeOpts, server.WithOffsetClock(n.offset))
	}
	ec := etcd.DefaultConfig()
	ec.Endpoints = endpoints
	ec.Cluster = cfg.Cluster
	ec.Timing = cfg.Timing
	ec.Clock = clock
	ec.Logger = log
	n.coord, err = etcd.New(ec)
	if err != nil {
		t.Fatalf("etcd coordinator: %v", err)
	}
	st, err := datadir.Open(dir)
	if err != nil {
		n.coord.Close()
		t.Fatalf("data dir: %v", err)
	}
	n.node, err = server.New(cfg, n.coord, st, clock, name, nodeOpts...)
	if err != nil {
		n.coord.Close()
		t.Fatalf("server.New: %v", err)
	}
	if err := n.node.Start(context.Background()); err != nil {
		n.coord.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("logs of the node on %s:\n%s", dir, n.logs.String())
		}
	})
	if cfg.TLS == nil {
		n.conn = dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials())
		n.ids = firnv1.NewIDServiceClient(n.conn)
		n.health = healthpb.NewHealthClient(n.conn)
		n.httpc = &http.Client{Timeout: 10 * time.Second}
		n.base = "http://" + n.node.HTTPAddr()
	}
	return n
}

// stop shuts the node down gracefully (once) and closes its coordinator.
func (n *tnode) stop() {
	n.stopOnce.Do(func() {
		if n.conn != nil {
			n.conn.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := n.node.Shutdown(ctx); err != nil {
			n.t.Errorf("Shutdown: %v", err)
		}
		n.coord.Close()
	})
}

func dialGRPC(t *testing.T, addr string, creds credentials.TransportCredentials, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func tlsCreds(c *tls.Config) credentials.TransportCredentials { return credentials.NewTLS(c) }

// ctx is a per-call context bounded well below the test timeout.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// genInfo returns the Info entry of one generator ("" is the default).
func (n *tnode) genInfo(t *testing.T, name string) *firnv1.GeneratorInfo {
	t.Helper()
	return infoOf(t, n.ids, name)
}

func infoOf(t *testing.T, cli firnv1.IDServiceClient, name string) *firnv1.GeneratorInfo {
	t.Helper()
	resp, err := cli.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	for _, g := range resp.GetGenerators() {
		if (name == "" && g.GetIsDefault()) || g.GetName() == name {
			return g
		}
	}
	t.Fatalf("Info lists no generator %q: %v", name, resp)
	return nil
}

// waitServing waits until the generator serves, failing with its reason.
func waitServing(t *testing.T, cli firnv1.IDServiceClient, name string, within time.Duration) {
	t.Helper()
	waitState(t, cli, name, true, within)
}

func waitNotServing(t *testing.T, cli firnv1.IDServiceClient, name string, within time.Duration) {
	t.Helper()
	waitState(t, cli, name, false, within)
}

func waitState(t *testing.T, cli firnv1.IDServiceClient, name string, serving bool, within time.Duration) {
	t.Helper()
	start := time.Now()
	var last *firnv1.GeneratorInfo
	for time.Since(start) < within {
		last = infoOf(t, cli, name)
		if last.GetServing() == serving {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("generator %q: serving=%v not reached within %v (state %s, reason %q)",
		name, serving, within, last.GetState(), last.GetReason())
}

// httpGet does a GET and returns the status and body.
func httpGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", u, err)
	}
	return resp.StatusCode, string(b)
}

// setOffset sets the injected clock offset through the fault listener.
func (n *tnode) setOffset(t *testing.T, d time.Duration) {
	t.Helper()
	resp, err := http.PostForm("http://"+n.node.FaultAddr()+"/debug/fault/clock-offset", url.Values{"offset": {d.String()}})
	if err != nil {
		t.Fatalf("setting the clock offset: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("setting the clock offset %v: %s: %s", d, resp.Status, b)
	}
}

// scrape reads /metrics and parses the exposition.
func scrape(t *testing.T, c *http.Client, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample finds the sample of a family whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f, ok := fams[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is a counter's, gauge's or untyped sample's value.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m, ok := sample(fams, name, labels)
	if !ok {
		t.Fatalf("/metrics has no %s%v", name, labels)
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

// increasing fails unless ids strictly increase; what names the sequence.
func increasing(t *testing.T, what string, ids []uint64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("%s: ID %d (%d) is not above ID %d (%d)", what, i, ids[i], i-1, ids[i-1])
		}
	}
}

// freeAddr is a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
}

// wallNow is the system clock's wall reading (through clockguard, the one
// place that reads the wall clock).
func wallNow() time.Time {
	w, _ := clockguard.NewSystem().Now()
	return w
}

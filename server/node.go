package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/server/clockpolicy"
	"github.com/firnid/firn/server/core"
	"github.com/firnid/firn/server/grpcopt"
)

// Option configures optional collaborators of a Node.
type Option func(*Node)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(n *Node) { n.log = l } }

// WithEmbeddedURL records the embedded etcd's client URL for Info.
func WithEmbeddedURL(u string) Option { return func(n *Node) { n.embeddedURL = u } }

// WithCoordinatorName names the coordinator in Info and the status page.
func WithCoordinatorName(s string) Option { return func(n *Node) { n.coordName = s } }

// WithOffsetClock gives the node the fault-injection clock (the clock it
// was built with must be this one).
func WithOffsetClock(o *clockguard.Offset) Option { return func(n *Node) { n.offset = o } }

// WithCoreOptions passes options to the node's core.
func WithCoreOptions(opts ...core.Option) Option {
	return func(n *Node) { n.coreOpts = append(n.coreOpts, opts...) }
}

// Node is one firn node: a core.Core (its generators, their leases and
// ring buffers, the clock policy) and the gRPC, HTTP and fault listeners,
// the health service and the metrics registry around it.
type Node struct {
	core   *core.Core
	cfg    core.Config
	clock  clockguard.Clock
	policy *clockpolicy.Policy // core.Policy
	hist   sync.Map            // generator name → *history, for the status page

	log         *slog.Logger
	offset      *clockguard.Offset
	coreOpts    []core.Option // WithCoreOptions
	embeddedURL string
	coordName   string

	reg     *prometheus.Registry
	metrics *metrics
	health  *health.Server

	grpcSrv  *grpc.Server
	httpSrv  *http.Server
	faultSrv *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	faultLis net.Listener
	tlsConf  *tls.Config

	// drain ends open health watches when the node drains (GracefulStop
	// waits for every stream).
	drainCtx    context.Context
	drainCancel context.CancelFunc

	wg      sync.WaitGroup // the servers
	stopped chan struct{}
	started time.Time
}

// New builds a node over a coordinator and its data-dir state (its own last
// reservations, fsynced before each Reserve). cfg must have passed Finish.
// Required collaborators are positional; clock is the node's clock source
// (an Offset clock when fault injection is on).
func New(cfg core.Config, coord coordinator.Coordinator, st *datadir.State, clock clockguard.Clock, name string, opts ...Option) (*Node, error) {
	wall, _ := clock.Now()
	n := &Node{
		cfg:     cfg,
		clock:   clock,
		log:     slog.Default(),
		reg:     prometheus.NewRegistry(),
		health:  health.NewServer(),
		stopped: make(chan struct{}),
		started: wall,
	}
	for _, o := range opts {
		o(n)
	}
	info := coordinator.NodeInfo{Name: name, InstanceID: st.InstanceID(), Address: cfg.GRPCAddr, StartTime: wall}
	c, err := core.New(cfg, coord, st, clock, info, append([]core.Option{core.WithLogger(n.log)}, n.coreOpts...)...)
	if err != nil {
		return nil, err
	}
	n.core, n.policy = c, c.Policy()
	// A generator the core adds while running (a definition the
	// coordinator holds) gets what those of the flags get here and in
	// watchStates.
	c.OnAdd(func(rt *core.Generator) { n.watchState(rt) })
	n.drainCtx, n.drainCancel = context.WithCancel(context.Background())
	n.metrics = newMetrics(n)
	return n, nil
}

// Registry is the node's Prometheus registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// NodeInfo is what the node writes in its owner records.
func (n *Node) NodeInfo() coordinator.NodeInfo { return n.core.NodeInfo() }

// GRPCAddr and HTTPAddr are the bound listener addresses (after Start).
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// FaultAddr is the fault listener's address, or "" without fault injection.
func (n *Node) FaultAddr() string {
	if n.faultLis == nil {
		return ""
	}
	return n.faultLis.Addr().String()
}

// Start binds the listeners, serves the APIs and starts the core; it
// returns once the listeners accept (generators become serving as their
// checks pass).
func (n *Node) Start(ctx context.Context) error {
	if err := n.listen(); err != nil {
		return err
	}
	n.watchStates()
	n.serveAPIs()
	if err := n.core.Start(); err != nil {
		return err
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.sampleHistory(n.drainCtx) }()
	n.log.Info("firn node started", "node", n.NodeInfo().Name, "instance", n.NodeInfo().InstanceID,
		"grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "cluster", n.cfg.Cluster,
		"coordinator", n.coordName, "embedded_etcd", n.embeddedURL)
	return nil
}

// listen binds the gRPC, HTTP and (with fault injection) fault listeners.
func (n *Node) listen() error {
	var err error
	n.tlsConf = n.cfg.TLS.Clone()
	if n.cfg.EnableFaultInjection && n.offset == nil {
		return fmt.Errorf("%w: fault injection needs the node's Offset clock", core.ErrConfig)
	}
	if n.grpcLis, err = net.Listen("tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	if n.httpLis, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		n.grpcLis.Close()
		return fmt.Errorf("--http-addr: %w", err)
	}
	if n.cfg.EnableFaultInjection {
		if n.faultLis, err = net.Listen("tcp", n.cfg.FaultAddr); err != nil {
			n.grpcLis.Close()
			n.httpLis.Close()
			return fmt.Errorf("--fault-addr: %w", err)
		}
		n.log.Warn("FAULT INJECTION ENABLED: this node's clock can be shifted over HTTP; never run it in production",
			"fault_addr", n.faultLis.Addr().String(), "offset", n.offset.CurrentOffset())
	}
	addr := n.grpcLis.Addr().String()
	if n.cfg.AdvertiseAddr != "" {
		addr = n.cfg.AdvertiseAddr
	} else if host, _, err := net.SplitHostPort(addr); err == nil && net.ParseIP(host).IsUnspecified() {
		n.log.Warn("gRPC listener on a wildcard address and no --advertise-addr: sequence generators name this node "+addr+" as the owner of its sections, which other hosts cannot dial",
			"grpc_addr", addr)
	}
	n.core.SetAddress(addr)
	return nil
}

// watchStates makes every transition of a generator's state a health
// status and a metric (the log line is the state's own; the status
// page's event, the core's).
func (n *Node) watchStates() {
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	for _, rt := range n.core.Generators() {
		n.watchState(rt)
	}
}

// watchState is watchStates for one generator, with its history.
func (n *Node) watchState(rt *core.Generator) {
	n.hist.Store(rt.Name(), &history{})
	n.health.SetServingStatus(rt.Name(), healthpb.HealthCheckResponse_NOT_SERVING)
	rt.State().Subscribe(func(t clockguard.Transition) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if t.To == clockguard.StateServing {
			st = healthpb.HealthCheckResponse_SERVING
		}
		n.health.SetServingStatus(rt.Name(), st)
		if rt.IsDefault() {
			n.health.SetServingStatus("", st)
		}
		if t.From != t.To {
			n.metrics.transitions.WithLabelValues(rt.Name(), t.To.String()).Inc()
		}
	})
}

// serveAPIs serves gRPC (the ID service, health, reflection), HTTP and the
// fault endpoint on the bound listeners.
func (n *Node) serveAPIs() {
	n.grpcSrv = grpc.NewServer(grpcopt.ServerOptions(n.tlsConf, n.cfg.GRPCMaxConnectionAge)...)
	// Registered through the metrics: each unary handler counts its calls.
	counted := countedServer{Server: n.grpcSrv, m: n.metrics.grpc}
	firnv1.RegisterIDServiceServer(counted, &idService{node: n})
	healthpb.RegisterHealthServer(counted, &drainingHealth{Server: n.health, drain: n.drainCtx})
	reflection.Register(counted)

	// net/http's own errors (TLS handshakes refused, ...) go to the node's
	// logger, not to the standard library's.
	httpLog := slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)
	n.httpSrv = &http.Server{Handler: n.httpHandler(), TLSConfig: httpTLS(n.tlsConf), ErrorLog: httpLog,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: httpReadTimeout,
		WriteTimeout: n.cfg.HTTPRequestTimeout + httpWriteMargin, IdleTimeout: n.cfg.HTTPIdleTimeout}
	n.serve(func() {
		if err := n.grpcSrv.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("gRPC server stopped", "err", err)
		}
	})
	n.serve(func() {
		var err error
		if n.tlsConf != nil {
			err = n.httpSrv.ServeTLS(n.httpLis, "", "")
		} else {
			err = n.httpSrv.Serve(n.httpLis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server stopped", "err", err)
		}
	})
	if n.faultLis != nil {
		n.faultSrv = &http.Server{Handler: n.faultHandler(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: httpLog}
		n.serve(func() {
			if err := n.faultSrv.Serve(n.faultLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("fault server stopped", "err", err)
			}
		})
	}
}

// httpReadTimeout bounds reading a whole HTTP request (the API's bodies
// are a few bytes); httpWriteMargin is what writing an answer may take
// beyond HTTPRequestTimeout (the largest batch's JSON, the metrics page).
const (
	httpReadTimeout = 10 * time.Second
	httpWriteMargin = 5 * time.Second
)

func (n *Node) serve(f func()) {
	n.wg.Add(1)
	go func() { defer n.wg.Done(); f() }()
}

// Shutdown drains: every generator stops serving at once (calls waiting in
// one are refused with "draining"), open health watches end, in-flight
// calls finish (within --shutdown-timeout), then the generators stop and
// release their leases, lowering reservations to what was produced, so a
// restart serves at once.
func (n *Node) Shutdown(ctx context.Context) error {
	n.core.Drain("shutting down")
	n.health.Shutdown()
	n.drainCancel()
	done := make(chan struct{})
	go func() { n.grpcSrv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		n.grpcSrv.Stop()
	}
	n.httpSrv.Shutdown(ctx)
	if n.faultSrv != nil {
		n.faultSrv.Shutdown(ctx)
	}
	n.wg.Wait()
	n.core.Stop()
	close(n.stopped)
	n.log.Info("firn node stopped", "node", n.NodeInfo().Name)
	return nil
}

// drainingHealth is the gRPC health service with watches that end when the
// node drains: grpc-go's health server leaves them open, and a graceful
// stop waits for every open stream, so one connected client would hold the
// drain for the whole --shutdown-timeout.
type drainingHealth struct {
	*health.Server
	drain context.Context
}

func (h *drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(h.drain, cancel)
	defer stop()
	err := h.Server.Watch(req, &watchStream{Health_WatchServer: stream, ctx: ctx})
	if h.drain.Err() != nil {
		return status.Error(codes.Unavailable, "node draining: shutting down")
	}
	return err
}

type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (s *watchStream) Context() context.Context { return s.ctx }

// Done is closed when Shutdown finished.
func (n *Node) Done() <-chan struct{} { return n.stopped }

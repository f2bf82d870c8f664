package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/local"
	"github.com/firnid/firn/generator"
	firnv1 "github.com/firnid/firn/proto/firn/v1"
	"github.com/firnid/firn/ringbuffer"
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

// Node is one firn node: its generators, their leases and ring buffers,
// the clock checks, and the gRPC, HTTP and fault listeners.
type Node struct {
	cfg         Config
	coord       coordinator.Coordinator
	local       *local.State
	clock       clockguard.Clock
	offset      *clockguard.Offset
	log         *slog.Logger
	nodeInfo    coordinator.NodeInfo
	embeddedURL string
	coordName   string

	gens   []*genRuntime
	byName map[string]*genRuntime

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

	ntp     *clockguard.NTPChecker
	steps   *clockguard.StepDetector
	ntpMu   sync.Mutex
	ntpLast clockguard.NTPResult
	ntpErr  error
	ntpHave bool

	// gate holds the node out after a forward step nobody confirmed.
	gate        fwdGate
	peerMu      sync.Mutex
	peerSkew    time.Duration
	peerCount   int
	peerChecked bool
	peerOver    int // consecutive checks beyond --max-peer-skew

	// drain ends open health watches when the node drains (GracefulStop
	// waits for every stream).
	drainCtx    context.Context
	drainCancel context.CancelFunc

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{}
	started time.Time
}

// New builds a node over a coordinator and its data-dir state (its own last
// reservations, fsynced before each Reserve). cfg must have passed Finish.
// Required collaborators are positional; clock is the node's clock source
// (an Offset clock when fault injection is on).
func New(cfg Config, coord coordinator.Coordinator, st *local.State, clock clockguard.Clock, name string, opts ...Option) (*Node, error) {
	if len(cfg.Generators) == 0 {
		return nil, fmt.Errorf("%w: no generators (call Config.Finish)", ErrConfig)
	}
	wall, _ := clock.Now()
	n := &Node{
		cfg:     cfg,
		coord:   coord,
		local:   st,
		clock:   clock,
		log:     slog.Default(),
		byName:  map[string]*genRuntime{},
		reg:     prometheus.NewRegistry(),
		health:  health.NewServer(),
		stopped: make(chan struct{}),
		started: wall,
	}
	for _, o := range opts {
		o(n)
	}
	n.nodeInfo = coordinator.NodeInfo{Name: name, InstanceID: st.InstanceID(), Address: cfg.GRPCAddr, StartTime: wall}
	for i, gc := range cfg.Generators {
		ring, err := ringbuffer.New(ringbuffer.Config{Size: cfg.RingSize, MaxStaleness: gc.MaxStaleness, Clock: clock})
		if err != nil {
			return nil, configErr("ring-size", "%v", err)
		}
		lg, err := st.Generator(gc.Name)
		if err != nil {
			return nil, fmt.Errorf("--data-dir: %w", err)
		}
		rt := &genRuntime{
			cfg:             gc,
			local:           lg,
			isDefault:       i == 0,
			maxBatch:        cfg.MaxBatchFor(gc),
			ring:            ring,
			datacenterFixed: cfg.Datacenter >= 0,
			kick:            make(chan struct{}, 1),
			reserveNow:      make(chan struct{}, 1),
			state: clockguard.NewServingState(gc.Name,
				clockguard.WithStateClock(clock), clockguard.WithStateLogger(n.log)),
		}
		rt.onForward = func(fs *generator.ForwardStepError) { n.forwardRefused(rt, fs) }
		n.gens = append(n.gens, rt)
		n.byName[gc.Name] = rt
	}
	n.drainCtx, n.drainCancel = context.WithCancel(context.Background())
	n.metrics = newMetrics(n)
	return n, nil
}

// Registry is the node's Prometheus registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// NodeInfo is what the node writes in its owner records.
func (n *Node) NodeInfo() coordinator.NodeInfo { return n.nodeInfo }

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

// lookup finds a generator; "" is the default.
func (n *Node) lookup(name string) (*genRuntime, error) {
	if name == "" {
		return n.gens[0], nil
	}
	rt, ok := n.byName[name]
	if !ok {
		names := make([]string, 0, len(n.gens))
		for _, g := range n.gens {
			names = append(names, g.cfg.Name)
		}
		return nil, fmt.Errorf("%w %q (this node runs %v)", ErrUnknownGenerator, name, names)
	}
	return rt, nil
}

// Start binds the listeners and starts everything; it returns once the
// listeners accept (generators become serving as their checks pass).
func (n *Node) Start(ctx context.Context) error {
	ctx, n.cancel = context.WithCancel(context.Background())
	var err error
	if n.tlsConf, err = n.serverTLS(); err != nil {
		return err
	}
	if n.cfg.EnableFaultInjection && n.offset == nil {
		return fmt.Errorf("%w: fault injection needs the node's Offset clock", ErrConfig)
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
	n.nodeInfo.Address = n.grpcLis.Addr().String()

	// Health and state: every transition is a log line (clockguard), a
	// metric and a health status.
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	for _, rt := range n.gens {
		rt := rt
		n.health.SetServingStatus(rt.cfg.Name, healthpb.HealthCheckResponse_NOT_SERVING)
		rt.state.Subscribe(func(t clockguard.Transition) {
			// Serving begins or ends: the generator is held out of
			// service while the state does not serve, so that every call
			// waiting in it is refused at once with the cause.
			if (t.From == clockguard.StateServing) != (t.To == clockguard.StateServing) {
				if h := rt.held.Load(); h != nil {
					h.gen.Hold(t.To != clockguard.StateServing)
				}
			}
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if t.To == clockguard.StateServing {
				st = healthpb.HealthCheckResponse_SERVING
			}
			n.health.SetServingStatus(rt.cfg.Name, st)
			if rt.isDefault {
				n.health.SetServingStatus("", st)
			}
			if t.From != t.To {
				n.metrics.transitions.WithLabelValues(rt.cfg.Name, t.To.String()).Inc()
			}
			rt.recordEvent(event{At: t.At, From: t.From.String(), To: t.To.String(), Reason: t.Reason})
		})
		if err := rt.state.Check(); err != nil {
			return err
		}
	}

	n.grpcSrv = grpc.NewServer(append(grpcopt.ServerOptions(n.tlsConf),
		grpc.ChainUnaryInterceptor(n.metrics.grpc.UnaryServerInterceptor()))...)
	firnv1.RegisterIDServiceServer(n.grpcSrv, &idService{node: n})
	healthpb.RegisterHealthServer(n.grpcSrv, &drainingHealth{Server: n.health, drain: n.drainCtx})
	reflection.Register(n.grpcSrv)
	n.metrics.grpc.InitializeMetrics(n.grpcSrv)

	// net/http's own errors (TLS handshakes refused, ...) go to the node's
	// logger, not to the standard library's.
	httpLog := slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)
	n.httpSrv = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 5 * time.Second, TLSConfig: httpTLS(n.tlsConf), ErrorLog: httpLog}
	n.goRun(func() {
		if err := n.grpcSrv.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("gRPC server stopped", "err", err)
		}
	})
	n.goRun(func() {
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
		n.goRun(func() {
			if err := n.faultSrv.Serve(n.faultLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("fault server stopped", "err", err)
			}
		})
	}

	if err := n.startClockChecks(ctx); err != nil {
		return err
	}
	// Hold every generator out until the clock was compared with the live
	// peers once: a node started far off their clocks never serves.
	for _, rt := range n.gens {
		rt.state.Set(clockguard.SourcePeers, "checking the clock against live peers' heartbeats")
	}
	for _, rt := range n.gens {
		rt := rt
		n.goRun(func() { n.runGenerator(ctx, rt) })
	}
	n.goRun(func() { n.peerLoop(ctx) })
	n.log.Info("firn node started", "node", n.nodeInfo.Name, "instance", n.nodeInfo.InstanceID,
		"grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "cluster", n.cfg.Cluster,
		"coordinator", n.coordName, "embedded_etcd", n.embeddedURL)
	return nil
}

func (n *Node) goRun(f func()) {
	n.wg.Add(1)
	go func() { defer n.wg.Done(); f() }()
}

// Shutdown drains: every generator stops serving at once (calls waiting in
// one are refused with "draining"), open health watches end, in-flight
// calls finish (within --shutdown-timeout), then the generators stop and
// release their leases, lowering reservations to what was produced, so a
// restart serves at once.
func (n *Node) Shutdown(ctx context.Context) error {
	for _, rt := range n.gens {
		rt.state.Drain("shutting down")
	}
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
	n.cancel() // runners release their leases on the way out
	n.wg.Wait()
	if n.ntp != nil {
		n.ntp.Stop()
	}
	if n.steps != nil {
		n.steps.Stop()
	}
	for _, rt := range n.gens {
		rt.ring.Close()
		rt.state.Stop()
	}
	close(n.stopped)
	n.log.Info("firn node stopped", "node", n.nodeInfo.Name)
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

// --- generators -------------------------------------------------------

// runGenerator acquires a lease, runs a generator on it for life, and
// acquires again after any loss, until the node stops.
func (n *Node) runGenerator(ctx context.Context, rt *genRuntime) {
	backoff := 200 * time.Millisecond
	rt.state.Set(clockguard.SourceLease, "acquiring a worker ID")
	for ctx.Err() == nil {
		h, err := n.acquire(ctx, rt)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.noteAcquireError(rt, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		n.hold(ctx, rt, h)
	}
}

func (n *Node) noteAcquireError(rt *genRuntime, err error) {
	var nameErr *coordinator.NameInUseError
	var restored *coordinator.RestoredError
	var rolled *coordinator.RolledBackError
	switch {
	case errors.As(err, &restored):
		rt.state.Set(clockguard.SourceCoordinator, n.restoreReason(rt, restored.Evidence))
	case errors.As(err, &rolled):
		// The data dir remembers more than the coordinator shows: a
		// restore. The marker stops every node, not only this one.
		n.markRestored(rt, rolled)
	case errors.As(err, &nameErr):
		rt.state.Set(clockguard.SourceInstance, err.Error())
	case errors.Is(err, coordinator.ErrRecreated),
		errors.Is(err, coordinator.ErrLayoutMismatch), errors.Is(err, coordinator.ErrSchemaTooNew):
		rt.state.Set(clockguard.SourceCoordinator, err.Error())
	default:
		rt.state.Set(clockguard.SourceLease, "acquiring a worker ID: "+err.Error())
	}
	n.metrics.coordErrors.WithLabelValues("acquire").Inc()
	n.log.Warn("cannot acquire a worker ID", "generator", rt.cfg.Name, "err", err)
}

// markRestored writes the generator-wide restore marker with what this
// node saw (retrying briefly), and holds the generator out naming the
// restore and the command that clears it.
func (n *Node) markRestored(rt *genRuntime, rb *coordinator.RolledBackError) {
	wall, _ := n.clock.Now()
	ev := coordinator.RestoreEvidence{Generator: rt.cfg.Name, Slot: rb.Slot, Acked: rb.Acked, Shown: rb.Seen, At: wall, Node: n.nodeInfo}
	rt.state.Set(clockguard.SourceCoordinator, n.restoreReason(rt, ev))
	n.metrics.restores.WithLabelValues(rt.cfg.Name).Inc()
	n.log.Error("coordinator state restored from an older snapshot: writing the generator's restore marker; no node serves it until `firn coordinator bump`",
		"generator", rt.cfg.Name, "worker", rb.Slot.Worker, "datacenter", rb.Slot.Datacenter,
		"acknowledged", rb.Acked, "shown", rb.Seen)
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.CoordinatorTimeout)
		err := n.coord.MarkRestored(ctx, ev)
		cancel()
		if err == nil {
			return
		}
		n.log.Warn("cannot write the restore marker yet", "generator", rt.cfg.Name, "err", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// acquire takes a lease and builds a new generator on it.
func (n *Node) acquire(ctx context.Context, rt *genRuntime) (*holding, error) {
	l := rt.cfg.Layout
	wall, _ := n.clock.Now()
	leadUnits := int64(rt.cfg.MaxLead / l.Unit)
	spec := coordinator.Spec{
		Generator:       rt.cfg.Name,
		Layout:          l.String(),
		WorkerLimit:     l.WorkerLimit(),
		DatacenterLimit: l.DatacenterLimit(),
		Datacenter:      n.cfg.Datacenter,
		MaxFloor:        max(0, l.Units(wall)+leadUnits),
		LocalFloor:      rt.local.LocalFloor(),
	}
	actx, cancel := context.WithTimeout(ctx, 4*n.cfg.CoordinatorTimeout)
	start := time.Now()
	lease, err := n.coord.Acquire(actx, spec, n.nodeInfo)
	cancel()
	n.metrics.coordLatency.WithLabelValues("acquire").Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	fail := func(err error, keep int64) (*holding, error) {
		rctx, cancel := context.WithTimeout(context.Background(), n.cfg.CoordinatorTimeout)
		lease.Release(rctx, keep)
		cancel()
		return nil, err
	}
	if err := rt.local.Check(lease); err != nil {
		// Released without lowering anything below what was read.
		return fail(err, max(lease.Floor(), rt.local.AckedFor(lease.Slot())))
	}
	floor := lease.Floor()
	g, err := generator.New(generator.Config{
		Layout:     l,
		Worker:     lease.WorkerID(),
		Datacenter: lease.Datacenter(),
		Clock:      n.clock,
		Floor:      floor,
		// Nothing is issued before the first acknowledged reservation.
		Reserved:       -1,
		MaxLead:        rt.cfg.MaxLead,
		MaxForwardStep: n.cfg.MaxClockOffset,
	})
	if err != nil {
		return fail(err, floor)
	}
	h := &holding{gen: g, lease: lease, started: wall}
	h.reserved.Store(-1)
	if h.rs, err = n.newReserver(rt, h); err != nil {
		return fail(err, floor)
	}
	n.log.Info("holder interval opened", "event", "holder_open", "generator", rt.cfg.Name,
		"worker", lease.WorkerID(), "datacenter", lease.Datacenter(), "floor", floor,
		"incarnation", lease.Incarnation(), "node", n.nodeInfo.Name, "instance", n.nodeInfo.InstanceID)
	return h, nil
}

// hold serves one lease until it is lost or the node stops.
func (n *Node) hold(ctx context.Context, rt *genRuntime, h *holding) {
	l := rt.cfg.Layout
	leadUnits := int64(rt.cfg.MaxLead / l.Unit)
	lease, g := h.lease, h.gen
	defer func() {
		g.Retire()
		h.stopExpiry()
		rt.ring.Reset(nil)
		rt.held.Store(nil)
		n.log.Info("holder interval closed", "event", "holder_close", "generator", rt.cfg.Name,
			"worker", lease.WorkerID(), "datacenter", lease.Datacenter(), "floor", lease.Floor(),
			"reserved", h.reserved.Load(), "highest", g.Highest(), "released", h.released.Load(), "node", n.nodeInfo.Name)
	}()

	// A floor far ahead of the clock (a restart after this node reserved
	// ahead, or a bump): wait until it lies within max-lead, reading the
	// clock again at least every 500 ms and at every step.
	for {
		wall, _ := n.clock.Now()
		ahead := lease.Floor() + 1 - l.Units(wall) - leadUnits
		if ahead <= 0 {
			break
		}
		wait := time.Duration(ahead) * l.Unit
		rt.state.Set(clockguard.SourceLease, fmt.Sprintf("waiting %v for the clock to reach this worker's last reservation (max-lead %v)",
			wait.Round(time.Millisecond), rt.cfg.MaxLead))
		select {
		case <-ctx.Done():
			n.release(rt, h)
			return
		case <-lease.Done():
			rt.state.Set(clockguard.SourceLease, "lease lost while waiting for the clock")
			return
		case <-time.After(min(wait, 500*time.Millisecond)):
		}
	}

	rt.ring.Reset(g)
	rt.held.Store(h)
	// The first reservation before any ID. Until it is acknowledged the
	// generator does not serve, naming why, and it is retried every
	// 200 ms.
	failing := false
	if err := n.reserve(ctx, rt, h); err != nil {
		switch {
		case errors.Is(err, coordinator.ErrLeaseLost):
			rt.state.Set(clockguard.SourceLease, "lease lost: "+err.Error())
			return
		case errors.Is(err, coordinator.ErrRolledBack):
			n.rolledBack(rt, h, err)
			return
		}
		rt.state.Set(clockguard.SourceReservation, "first reservation not confirmed by the coordinator: "+err.Error())
		failing = true
	}
	rt.state.Clear(clockguard.SourceLease)
	rt.state.Clear(clockguard.SourceInstance)
	rt.state.Clear(clockguard.SourceCoordinator)
	rt.state.Ready()
	rt.ring.Start()

	// The loop wakes once a second at idle: a clock check and the
	// reservation with its heartbeat. It checks every 100 ms while a
	// rollback hold waits for the clock to catch up (setRollback kicks it
	// awake), and retries a failed reservation every 200 ms.
	const (
		refresh  = time.Second
		retry    = 200 * time.Millisecond
		recovery = 100 * time.Millisecond
	)
	first := refresh
	if failing {
		first = retry
	}
	timer := time.NewTimer(rt.nextCheck(first, recovery))
	defer timer.Stop()
	lastTry := time.Now()
	for {
		select {
		case <-ctx.Done():
			n.release(rt, h)
			return
		case <-lease.Done():
			rt.state.Set(clockguard.SourceLease, "lease lost (expired or taken over); acquiring again")
			return
		case <-rt.kick:
		case <-timer.C:
		case <-rt.reserveNow:
			lastTry = time.Time{}
		}
		n.probeClock(rt, h)
		due := refresh
		if failing {
			due = retry
		}
		if wait := due - time.Since(lastTry); wait > 0 && !lastTry.IsZero() {
			timer.Reset(rt.nextCheck(wait, recovery))
			continue
		}
		lastTry = time.Now()
		// A step since the detector's last poll reaches the clock policy
		// (and the forward-step gate) before this reservation is sized.
		n.steps.Poll()
		err := n.reserve(ctx, rt, h)
		switch {
		case err == nil:
			failing = false
		case errors.Is(err, coordinator.ErrLeaseLost):
			rt.state.Set(clockguard.SourceLease, "lease lost: "+err.Error())
			return
		case errors.Is(err, coordinator.ErrRolledBack):
			n.rolledBack(rt, h, err)
			return
		default:
			failing = true
		}
		next := refresh
		if failing {
			next = retry
		}
		timer.Reset(rt.nextCheck(next, recovery))
	}
}

// rolledBack ends a holding whose reservation the coordinator showed below
// one acknowledged: the generator stops, the restore marker is written for
// every node, and the lease is released without lowering anything.
func (n *Node) rolledBack(rt *genRuntime, h *holding, err error) {
	h.gen.Retire()
	rt.ring.Reset(nil)
	var rb *coordinator.RolledBackError
	if errors.As(err, &rb) {
		n.markRestored(rt, rb)
	} else {
		rt.state.Set(clockguard.SourceCoordinator, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.CoordinatorTimeout)
	defer cancel()
	if err := h.lease.Release(ctx, max(h.reserved.Load(), h.lease.Floor())); err != nil {
		n.log.Warn("lease not released after the restore was noticed; it will expire", "generator", rt.cfg.Name, "err", err)
	}
}

// newReserver builds the coordinator's Reserver for one holding: one
// window ahead of max(L, now), journaled in the data dir before each write
// (within a deadline), held below an unconfirmed forward clock step.
func (n *Node) newReserver(rt *genRuntime, h *holding) (*coordinator.Reserver, error) {
	l := rt.cfg.Layout
	return coordinator.NewReserver(coordinator.ReserverConfig{
		Lease: h.lease,
		Node:  n.nodeInfo,
		Clock: n.clock,
		Now: func() int64 {
			wall, _ := n.clock.Now()
			return l.Units(wall)
		},
		Logical: h.gen.Logical,
		Gate:    func(wanted int64) int64 { return n.holdReserved(h, wanted) },
		Journal: newBoundedJournal(n.journalFor(rt), 2*n.cfg.CoordinatorTimeout),
		OnAck: func(r int64) {
			h.reserved.Store(r)
			h.gen.SetReserved(r)
			n.armExpiry(rt, h)
			n.log.Debug("reservation acknowledged", "event", "holder_reserve", "generator", rt.cfg.Name,
				"worker", h.lease.WorkerID(), "datacenter", h.lease.Datacenter(), "reserved", r)
		},
		Window:      max(int64(n.cfg.ReservationWindow/l.Unit), 1),
		MaxUntil:    l.MaxTime(),
		Interval:    time.Second,
		CallTimeout: 2 * n.cfg.CoordinatorTimeout,
		Logger:      n.log,
	})
}

// reserve runs one Reserver step and feeds the serving state and metrics.
func (n *Node) reserve(ctx context.Context, rt *genRuntime, h *holding) error {
	start := time.Now()
	err := h.rs.Step(ctx)
	took := time.Since(start)
	n.metrics.coordLatency.WithLabelValues("reserve").Observe(took.Seconds())
	if err != nil {
		n.metrics.coordErrors.WithLabelValues("reserve").Inc()
		msg := err.Error()
		h.lastErr.Store(&msg)
		// Not extended: the generator stops at the old reservation (the
		// expiry timer takes it out shortly before).
		wall, _ := n.clock.Now()
		left := rt.cfg.Layout.UnitStart(h.reserved.Load() + 1).Sub(wall)
		if left <= 0 && h.reserved.Load() >= 0 {
			rt.state.Set(clockguard.SourceReservation, fmt.Sprintf("reservation exhausted: the coordinator did not confirm a new one (%v)", err))
		}
		if !errors.Is(err, coordinator.ErrLeaseLost) {
			n.log.Warn("reservation not extended", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(),
				"left", left.Round(time.Millisecond), "err", err)
		}
		return err
	}
	h.noteWriteLatency(took)
	n.armExpiry(rt, h)
	rt.state.Clear(clockguard.SourceReservation)
	return nil
}

// release stops the generator and frees the lease, lowering the
// reservation to the highest time produced.
func (n *Node) release(rt *genRuntime, h *holding) {
	h.gen.Retire()
	rt.ring.Reset(nil)
	highest := max(h.gen.Highest(), h.lease.Floor())
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.CoordinatorTimeout)
	defer cancel()
	if err := runBounded(ctx, func() error { return rt.local.BeforeRelease(h.lease.Slot(), highest) }); err != nil {
		n.log.Warn("cannot lower the data-dir reservation; the lease is left to expire", "generator", rt.cfg.Name, "err", err)
		return
	}
	if err := h.lease.Release(ctx, highest); err != nil {
		n.log.Warn("lease not released; it will expire", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(), "err", err)
		return
	}
	h.released.Store(true)
	n.log.Info("lease released", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(), "highest", highest)
}

// probeClock holds the generator out of service while its logical time is
// more than max-lead ahead of the clock after a backward step beyond it,
// and lets it serve again once the clock caught up (auto recovery).
func (n *Node) probeClock(rt *genRuntime, h *holding) {
	wall, _ := n.clock.Now()
	lead := h.gen.Lead(wall)
	if _, held := rt.state.Holds(clockguard.SourceClockRollback); held {
		rt.mu.Lock()
		manual := rt.manualHold
		rt.mu.Unlock()
		if lead <= rt.cfg.MaxLead && n.cfg.RollbackRecovery == "auto" && !manual {
			rt.state.Clear(clockguard.SourceClockRollback)
			n.log.Info("clock caught up after a rollback; serving again", "generator", rt.cfg.Name, "lead", lead)
		}
		return
	}
	if u := rt.cfg.Layout.Units(wall); u < 0 || u > rt.cfg.Layout.MaxTime() {
		rt.state.Set(clockguard.SourceClockRange, (&generator.RangeError{Clock: wall, Epoch: rt.cfg.Layout.Epoch, End: rt.cfg.Layout.End()}).Error())
	} else {
		rt.state.Clear(clockguard.SourceClockRange)
	}
}

// onStep reacts to a step of the wall clock seen by the step detector,
// also while no call arrives.
func (n *Node) onStep(st clockguard.Step) {
	if st.Backward() {
		n.metrics.steps.WithLabelValues("backward").Inc()
	} else {
		n.metrics.steps.WithLabelValues("forward").Inc()
	}
	n.metrics.lastStep.Set(-st.Size.Seconds())
	n.log.Warn("clock step", "step", st.String(), "size", -st.Size)
	if st.Backward() {
		for _, rt := range n.gens {
			h := rt.held.Load()
			if h == nil || st.Size <= rt.cfg.MaxLead {
				continue
			}
			if lead := h.gen.Lead(st.Wall); lead > rt.cfg.MaxLead {
				reason := (&generator.RollbackError{Step: st.Size, Limit: rt.cfg.MaxLead}).Error()
				rt.setRollback(reason)
				if n.cfg.RollbackRecovery == "manual" {
					rt.mu.Lock()
					rt.manualHold = true
					rt.mu.Unlock()
				}
			}
		}
	}
	// Either way: the forward-step gate sees the reading, NTP is asked at
	// once, every wait sized from the old clock is woken, and every
	// reservation-expiry timer is sized again.
	n.gateReading(st.Wall, st.Mono)
	if n.ntp != nil {
		n.ntp.Trigger()
	}
	for _, rt := range n.gens {
		if h := rt.held.Load(); h != nil {
			h.gen.Wake()
			n.armExpiryAfterStep(rt, h)
			rt.askReserve()
		}
	}
}

func (n *Node) peersConfigured() bool {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	return n.peerCount >= 3
}

// Resume ends a manual-recovery hold (POST /admin/resume).
func (n *Node) Resume(generatorName string) error {
	rt, err := n.lookup(generatorName)
	if err != nil {
		return err
	}
	if h := rt.held.Load(); h != nil {
		wall, _ := n.clock.Now()
		if lead := h.gen.Lead(wall); lead > rt.cfg.MaxLead {
			return fmt.Errorf("clock still %v behind the last ID (max-lead %v): not resumed", lead.Round(time.Millisecond), rt.cfg.MaxLead)
		}
	}
	rt.mu.Lock()
	rt.manualHold = false
	rt.mu.Unlock()
	rt.state.Clear(clockguard.SourceClockRollback)
	rt.state.Clear(clockguard.SourceManual)
	return nil
}

// --- clock checks -----------------------------------------------------

func (n *Node) startClockChecks(ctx context.Context) error {
	n.initGate()
	var err error
	n.steps, err = clockguard.NewStepDetector(n.clock, clockguard.DefaultStepConfig(),
		clockguard.WithStepCallback(n.onStep), clockguard.WithStepLogger(n.log))
	if err != nil {
		return err
	}
	if err := n.steps.Start(); err != nil {
		return err
	}
	if len(n.cfg.NTP) == 0 {
		n.log.Warn("NO NTP CONFIGURED: clock drift is unchecked (set --ntp)")
		return nil
	}
	nc, err := n.cfg.ntpConfig()
	if err != nil {
		return err
	}
	n.ntp, err = clockguard.NewNTPChecker(n.clock, nc, clockguard.WithNTPLogger(n.log),
		clockguard.WithNTPCallback(n.onNTP))
	if err != nil {
		return configErr("ntp", "%v", err)
	}
	// Hold every generator out until the first check answers.
	for _, rt := range n.gens {
		rt.state.Set(clockguard.SourceNTP, "waiting for the first NTP check")
	}
	return n.ntp.Start()
}

func (n *Node) onNTP(res clockguard.NTPResult, err error) {
	n.ntpMu.Lock()
	n.ntpLast, n.ntpErr, n.ntpHave = res, err, true
	n.ntpMu.Unlock()
	if err != nil || !res.OK {
		n.metrics.ntpFailures.Inc()
	}
	var reason string
	switch {
	case err == nil && res.OK:
	case errors.Is(err, clockguard.ErrOffsetTooLarge):
		reason = fmt.Sprintf("NTP offset %v beyond --max-clock-offset %v", res.Offset.Round(time.Millisecond), n.cfg.MaxClockOffset)
	case err != nil && n.cfg.NTPRequired:
		reason = "NTP required and unreachable: " + err.Error()
	case err != nil:
		n.log.Warn("NTP unreachable (not required): serving with drift unchecked", "err", err)
	default:
		reason = fmt.Sprintf("NTP check failed: %d of %d usable answers", res.Valid, res.Need)
	}
	for _, rt := range n.gens {
		if reason == "" {
			rt.state.Clear(clockguard.SourceNTP)
		} else {
			rt.state.Set(clockguard.SourceNTP, reason)
		}
	}
	// The forward-step gate: a check begun after the step that agrees
	// confirms it. Unreachable NTP confirms nothing, required or not: the
	// gate then holds until NTP answers, the peers agree, or the clock
	// comes back (its reason says so).
	if err == nil && res.OK {
		n.confirmGate(res.StartMono, "NTP agrees with the clock")
	}
}

func (n *Node) lastNTPOffset() (time.Duration, bool) {
	n.ntpMu.Lock()
	defer n.ntpMu.Unlock()
	if !n.ntpHave || n.ntpErr != nil {
		return 0, false
	}
	return n.ntpLast.Offset, true
}

// peerLoop compares this node's clock with its live peers' heartbeats, as
// received: at once at start (retried every 200 ms until the coordinator
// answers), then about once a second.
func (n *Node) peerLoop(ctx context.Context) {
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, n.cfg.CoordinatorTimeout)
		beats, err := n.coord.Peers(pctx)
		cancel()
		if err != nil {
			if first {
				t.Reset(200 * time.Millisecond)
			} else {
				t.Reset(time.Second)
			}
			continue
		}
		n.countInUse(beats)
		n.checkPeers(beats, first)
		first = false
		t.Reset(time.Second)
	}
}

// peerBeatAge bounds how old a heartbeat read (rather than received as it
// was written) can be: holders write one with each reservation, about once
// a second. Read at the right time, it makes a peer seem behind by as much.
const peerBeatAge = time.Second

// countInUse records, per generator, how many worker slots have a live
// owner in the cluster (firn_worker_ids_in_use): one beat per live owner.
func (n *Node) countInUse(beats []coordinator.PeerBeat) {
	live := map[string]map[coordinator.Slot]bool{}
	for _, b := range beats {
		if live[b.Generator] == nil {
			live[b.Generator] = map[coordinator.Slot]bool{}
		}
		live[b.Generator][b.Slot] = true
	}
	for _, rt := range n.gens {
		rt.inUse.Store(int64(len(live[rt.cfg.Name])))
	}
}

// peerGateReading feeds the forward-step gate a peer reading made only of
// heartbeats received after the step (a heartbeat received before it says
// nothing of the stepped clock), when there are enough of them for the
// median of at least 3 nodes.
func (n *Node) peerGateReading(latest map[string]coordinator.PeerBeat) {
	pending, stepWall := n.gatePending()
	if !pending {
		return
	}
	offsets := []time.Duration{0}
	for _, b := range latest {
		if !b.Received.Before(stepWall) {
			offsets = append(offsets, b.Heartbeat.Wall.Sub(b.Received))
		}
	}
	if len(offsets) < 3 {
		return
	}
	skew := -median(offsets)
	n.gatePeerReading(max(skew, -skew) <= n.cfg.MaxPeerSkew)
}

// median of a non-empty slice (sorted in place); the mean of the middle two
// for an even count.
func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	if len(d)%2 == 0 {
		return (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return d[len(d)/2]
}

// checkPeers takes the median clock offset over all live nodes, this one
// included (offset 0), one entry per instance; the node stops serving only
// when it is the outlier beyond --max-peer-skew among at least 3.
//
// The first check at start acts on its one reading: it refuses a skew
// beyond --max-peer-skew by more than peerBeatAge (what a heartbeat read
// rather than received may add), so that a node started far off never
// serves, and otherwise lets the node serve; later checks act on two
// readings in a row beyond the limit.
func (n *Node) checkPeers(beats []coordinator.PeerBeat, first bool) {
	latest := map[string]coordinator.PeerBeat{}
	for _, b := range beats {
		id := b.Heartbeat.Node.InstanceID
		if id == n.nodeInfo.InstanceID {
			continue
		}
		if b.Received.IsZero() {
			continue // not received as a fresh heartbeat yet
		}
		if old, ok := latest[id]; !ok || b.Received.After(old.Received) {
			latest[id] = b
		}
	}
	offsets := []time.Duration{0}
	for _, b := range latest {
		offsets = append(offsets, b.Heartbeat.Wall.Sub(b.Received))
	}
	skew := -median(offsets) // this node's clock minus the median
	n.peerMu.Lock()
	n.peerSkew, n.peerCount, n.peerChecked = skew, len(offsets), true
	n.peerMu.Unlock()
	n.metrics.peerSkew.Set(skew.Seconds())
	abs := max(skew, -skew)
	var reason string
	// One reading beyond the limit may be a heartbeat read at start rather
	// than received fresh; act on two in a row.
	n.peerMu.Lock()
	switch {
	case first && abs > n.cfg.MaxPeerSkew+peerBeatAge:
		n.peerOver = 2
	case first:
		n.peerOver = 0
	case abs > n.cfg.MaxPeerSkew:
		n.peerOver++
	default:
		n.peerOver = 0
	}
	over := n.peerOver
	n.peerMu.Unlock()
	if abs > n.cfg.MaxPeerSkew && over >= 2 {
		if len(offsets) >= 3 {
			reason = fmt.Sprintf("clock %v from the peer median of %d nodes, beyond --max-peer-skew %v",
				skew.Round(time.Millisecond), len(offsets), n.cfg.MaxPeerSkew)
		} else {
			n.log.Warn("clock differs from the only peer; with 2 nodes firn only warns",
				"skew", skew.Round(time.Millisecond), "max_peer_skew", n.cfg.MaxPeerSkew)
		}
	}
	n.peerGateReading(latest)
	for _, rt := range n.gens {
		if reason == "" {
			rt.state.Clear(clockguard.SourcePeers)
		} else {
			rt.state.Set(clockguard.SourcePeers, reason)
		}
	}
}

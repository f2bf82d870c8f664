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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

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

	// fwdStep is the mono reading of a forward step beyond
	// --max-clock-offset not yet confirmed by NTP or peers (0: none).
	fwdStep     atomic.Int64
	peerMu      sync.Mutex
	peerSkew    time.Duration
	peerCount   int
	peerChecked bool
	peerOver    int // consecutive checks beyond --max-peer-skew

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
			state: clockguard.NewServingState(gc.Name,
				clockguard.WithStateClock(clock), clockguard.WithStateLogger(n.log)),
		}
		n.gens = append(n.gens, rt)
		n.byName[gc.Name] = rt
	}
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
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
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

// Shutdown drains: it stops accepting, lets in-flight calls finish (within
// --shutdown-timeout), stops the generators and releases their leases,
// lowering reservations to what was produced, so a restart serves at once.
func (n *Node) Shutdown(ctx context.Context) error {
	for _, rt := range n.gens {
		rt.state.Drain("shutting down")
	}
	n.health.Shutdown()
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
	switch {
	case errors.As(err, &nameErr):
		rt.state.Set(clockguard.SourceInstance, err.Error())
	case errors.Is(err, coordinator.ErrRolledBack), errors.Is(err, coordinator.ErrRecreated),
		errors.Is(err, coordinator.ErrLayoutMismatch), errors.Is(err, coordinator.ErrSchemaTooNew):
		rt.state.Set(clockguard.SourceCoordinator, err.Error())
	default:
		rt.state.Set(clockguard.SourceLease, "acquiring a worker ID: "+err.Error())
	}
	n.metrics.coordErrors.WithLabelValues("acquire").Inc()
	n.log.Warn("cannot acquire a worker ID", "generator", rt.cfg.Name, "err", err)
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
	fail := func(err error) (*holding, error) {
		rctx, cancel := context.WithTimeout(context.Background(), n.cfg.CoordinatorTimeout)
		lease.Release(rctx, lease.Floor())
		cancel()
		return nil, err
	}
	if err := rt.local.Check(lease); err != nil {
		return fail(err)
	}
	floor := lease.Floor()
	g, err := generator.New(generator.Config{
		Layout:     l,
		Worker:     lease.WorkerID(),
		Datacenter: lease.Datacenter(),
		Clock:      n.clock,
		Floor:      floor,
		Reserved:   max(floor, 0),
		MaxLead:    rt.cfg.MaxLead,
	})
	if err != nil {
		return fail(err)
	}
	h := &holding{gen: g, lease: lease, started: wall}
	h.reserved.Store(max(floor, 0))
	if h.rs, err = n.newReserver(rt, h); err != nil {
		return fail(err)
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
		rt.ring.Reset(nil)
		rt.held.Store(nil)
		n.log.Info("holder interval closed", "event", "holder_close", "generator", rt.cfg.Name,
			"worker", lease.WorkerID(), "datacenter", lease.Datacenter(), "floor", lease.Floor(),
			"reserved", h.reserved.Load(), "highest", g.Highest(), "released", h.released.Load(), "node", n.nodeInfo.Name)
	}()

	// A floor far ahead of the clock (a restart after this node reserved
	// ahead): wait until it lies within max-lead.
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

	// The first reservation before any ID.
	if err := n.reserve(ctx, rt, h); err != nil {
		if errors.Is(err, coordinator.ErrLeaseLost) {
			rt.state.Set(clockguard.SourceLease, "lease lost: "+err.Error())
			return
		}
	}
	rt.ring.Reset(g)
	rt.held.Store(h)
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
	timer := time.NewTimer(recovery)
	defer timer.Stop()
	lastTry := time.Now()
	failing := false
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
		}
		n.probeClock(rt, h)
		due := refresh
		if failing {
			due = retry
		}
		if wait := due - time.Since(lastTry); wait > 0 {
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
			rt.state.Set(clockguard.SourceCoordinator, err.Error())
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

// newReserver builds the coordinator's Reserver for one holding: one
// window ahead of max(L, now), journaled in the data dir before each write,
// held below an unconfirmed forward clock step.
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
		Gate: func(wanted int64) int64 {
			_, mono := n.clock.Now()
			if fwd := n.fwdStep.Load(); fwd != 0 && time.Duration(fwd) <= mono {
				// An unconfirmed forward step: keep the heartbeat
				// flowing at the current reservation.
				return min(wanted, max(h.reserved.Load(), 0))
			}
			return wanted
		},
		Journal: rt.local,
		OnAck: func(r int64) {
			h.reserved.Store(r)
			h.gen.SetReserved(r)
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
	n.metrics.coordLatency.WithLabelValues("reserve").Observe(time.Since(start).Seconds())
	if err != nil {
		n.metrics.coordErrors.WithLabelValues("reserve").Inc()
		// Not extended: the generator stops at the old reservation.
		wall, _ := n.clock.Now()
		left := rt.cfg.Layout.UnitStart(h.reserved.Load() + 1).Sub(wall)
		if left <= 0 {
			rt.state.Set(clockguard.SourceReservation, fmt.Sprintf("reservation exhausted: the coordinator did not confirm a new one (%v)", err))
		}
		if !errors.Is(err, coordinator.ErrLeaseLost) {
			n.log.Warn("reservation not extended", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(),
				"left", left.Round(time.Millisecond), "err", err)
		}
		return err
	}
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
	if err := rt.local.BeforeRelease(h.lease.Slot(), highest); err != nil {
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
		return
	}
	if -st.Size > n.cfg.MaxClockOffset {
		if len(n.cfg.NTP) == 0 && !n.peersConfigured() {
			n.log.Warn("forward clock step accepted unconfirmed: no NTP and no peers to check it", "size", -st.Size)
			return
		}
		n.fwdStep.Store(max(int64(st.Mono), 1))
		n.log.Warn("forward clock step: reservations held until NTP or the peer median confirms the clock", "size", -st.Size)
		if n.ntp != nil {
			go n.checkNTPNow()
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

func (n *Node) checkNTPNow() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := n.ntp.Check(ctx)
	n.onNTP(res, err)
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
	if reason == "" && err == nil && res.OK {
		n.fwdStep.Store(0) // NTP agrees with the clock: any forward step is confirmed
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
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	median := offsets[len(offsets)/2]
	if len(offsets)%2 == 0 {
		median = (offsets[len(offsets)/2-1] + offsets[len(offsets)/2]) / 2
	}
	skew := -median // this node's clock minus the median
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
	} else if len(offsets) >= 3 {
		n.fwdStep.Store(0) // the peer median agrees with this clock
	}
	for _, rt := range n.gens {
		if reason == "" {
			rt.state.Clear(clockguard.SourcePeers)
		} else {
			rt.state.Set(clockguard.SourcePeers, reason)
		}
	}
}

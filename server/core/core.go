package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/clockpolicy"
)

// Core is a node without its listeners: its generators with their ring
// buffers, serving states and holders, and the clock policy with its
// inputs (the step detector, NTP, the peers' heartbeats). A Node wires
// listeners, health and metrics around one; the simulator runs several on
// a memory coordinator in virtual time.
type Core struct {
	cfg      Config
	coord    coordinator.Coordinator
	local    *datadir.State
	clock    clockguard.Clock
	log      *slog.Logger
	nodeInfo coordinator.NodeInfo

	// set is the node's generators: those of its flags, then those of the
	// coordinator's definitions it started while running (definitions.go),
	// replaced whole when one is added (addMu), read without a lock.
	set   atomic.Pointer[genSet]
	addMu sync.Mutex
	// runCtx is the context the started core runs under (nil before
	// Start); onAdd are told of each generator added after New.
	runCtx context.Context
	onAdd  []func(*Generator)
	// skipped are the definitions this node cannot run, by name, with
	// why (logged once each, and named to each call for them): a
	// map[string]string.
	skipped sync.Map
	// allow: some generator has an allow list (Authorize has work to do):
	// a flag's, or a definition's once read.
	allow atomic.Bool
	// defsUnread, while the definitions were never read since the node
	// started, is why (the read's error): a name the node does not run
	// may be one the coordinator defines, so it is refused naming that,
	// not as unknown (Find). Nil once read, or with no definitions to read.
	defsUnread atomic.Pointer[string]

	policy *clockpolicy.Policy
	hm     holderMetrics
	steps  *clockguard.StepDetector
	ntp    ntpRunner
	// newNTP builds the NTP runner (nil: the real checker of --ntp).
	newNTP func(report func(clockguard.NTPResult, error)) (ntpRunner, error)
	// wrapJournal wraps each generator's data-dir journal (nil: none).
	wrapJournal func(coordinator.Journal) coordinator.Journal

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	crashed atomic.Bool // Crash: holders release nothing on the way out
	drained atomic.Bool // Drain began: no generator is added any more
}

// ntpRunner is what the core needs of an NTP checker: a periodic loop
// whose verdicts reach the clock policy, and a check on demand.
type ntpRunner = NTPRunner

// NTPRunner is an NTP checker as the core runs it: a periodic loop whose
// verdicts go to the report function it was built with, and a check on
// demand (Trigger). clockguard.NTPChecker is one; the simulator has a fake.
type NTPRunner interface {
	Start() error
	Stop()
	Trigger()
}

// Option configures optional collaborators of a Core.
type Option func(*Core)

// WithLogger sets the core's logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Core) { c.log = l } }

// WithNTPRunner replaces the NTP checker of --ntp (which queries its
// servers over UDP) with the runner newNTP builds; its verdicts go to
// report. Used when --ntp is set.
func WithNTPRunner(newNTP func(report func(clockguard.NTPResult, error)) (NTPRunner, error)) Option {
	return func(c *Core) { c.newNTP = newNTP }
}

// WithJournalWrap wraps each generator's data-dir journal in what wrap
// returns: to observe the writes a node fsyncs before each reservation,
// or to stall or fail them.
func WithJournalWrap(wrap func(coordinator.Journal) coordinator.Journal) Option {
	return func(c *Core) { c.wrapJournal = wrap }
}

// New builds a node's core — generators, holders, clock policy — over
// a coordinator, the data-dir state and a clock, with no listener: for
// embedding firn in a process of one's own, and for the simulator. cfg must
// have passed Finish. Start runs it; Stop ends it, releasing its leases;
// Crash ends it as a killed process would, leaving them to expire.
func New(cfg Config, coord coordinator.Coordinator, st *datadir.State, clock clockguard.Clock, info coordinator.NodeInfo, opts ...Option) (*Core, error) {
	if len(cfg.Generators) == 0 {
		return nil, fmt.Errorf("%w: no generators (call Config.Finish)", ErrConfig)
	}
	c := &Core{cfg: cfg, coord: coord, local: st, clock: clock, log: slog.Default(), nodeInfo: info}
	for _, o := range opts {
		o(c)
	}
	set := &genSet{byName: map[string]*Generator{}}
	for i, gc := range cfg.Generators {
		rt, err := c.build(gc, i == 0)
		if err != nil {
			return nil, err
		}
		set.list = append(set.list, rt)
		set.byName[gc.Name] = rt
	}
	c.set.Store(set)
	// The clock policy acts on the snowflake generators only: a segment
	// generator has no clock in it.
	var views []clockpolicy.Generator
	for _, rt := range set.list {
		if !rt.isSegment() {
			views = append(views, policyGen{rt})
		}
	}
	c.policy = clockpolicy.New(clockpolicy.Config{
		MaxClockOffset:   cfg.MaxClockOffset,
		MaxPeerSkew:      cfg.MaxPeerSkew,
		NTP:              len(cfg.NTP) > 0,
		NTPRequired:      cfg.NTPRequired,
		RollbackRecovery: cfg.RollbackRecovery,
		RefuseUnchecked:  uncheckedWhy(cfg) == "",
		UncheckedWhy:     uncheckedWhy(cfg),
	}, clock, c.log, views)
	c.hm = newHolderMetrics(set.list)
	for _, rt := range set.list {
		c.wire(rt)
	}
	return c, nil
}

// genSet is the node's generators, the default first, and by name.
type genSet struct {
	list   []*Generator
	byName map[string]*Generator
}

// build makes the generator of gc, not yet wired to the clock policy nor
// started.
func (c *Core) build(gc GeneratorConfig, isDefault bool) (*Generator, error) {
	cfg, clock, log := c.cfg, c.clock, c.log
	lg, err := c.local.Generator(gc.Name)
	if err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	if gc.Segment != nil {
		rt := newSegmentGenerator(cfg, gc, isDefault, clock, log)
		rt.local = lg
		return rt, nil
	}
	ring, err := ringbuffer.New(ringbuffer.Config{Size: cfg.RingSize, MaxStaleness: gc.MaxStaleness, Clock: clock})
	if err != nil {
		return nil, configErr("ring-size", "%v", err)
	}
	// The generator's source is held exactly while its state does not
	// serve (clockguard.WithServingGate): every call waiting in it is
	// refused at once with the cause, and a worker joining the source
	// takes the source's hold (docs/design.md, Liveness rules).
	wide := generator.NewWide(gc.Layout, clock, gc.MaxLead)
	wide.Hold(true)
	rt := &Generator{
		cfg:       gc,
		clock:     clock,
		local:     lg,
		isDefault: isDefault,
		maxBatch:  cfg.MaxBatchFor(gc),
		maxRange:  cfg.MaxRangeFor(gc),
		// Sized for one worker; re-sized as workers serve (setLive).
		fair:            admission.NewFairShare(gc.Layout.Rate(), gc.Layout.PerUnit(), cfg.MaxQueueFor(gc, 1)),
		refusals:        admission.NewRefusals(),
		maxQueue:        func(workers int) int64 { return cfg.MaxQueueFor(gc, workers) },
		wide:            wide,
		maxWorkers:      cfg.WorkersFor(),
		auto:            cfg.WorkersAuto,
		ring:            ring,
		datacenterFixed: cfg.Datacenter >= 0,
		state: clockguard.NewServingState(gc.Name,
			clockguard.WithStateClock(clock), clockguard.WithStateLogger(log),
			clockguard.WithServingGate(func(serving bool) { wide.Hold(!serving) })),
	}
	if cfg.ClientRate > 0 {
		rt.limits = admission.NewClientLimits(cfg.ClientRate, cfg.ClientBurstOrDefault(), func() time.Duration {
			_, mono := clock.Now()
			return mono
		})
	}
	rt.wantW.Store(int64(max(cfg.Workers, 1)))
	return rt, nil
}

// wire ties rt to the node's clock policy and its own status: a generator
// leaving serving ends every wait for a turn (the waiters are refused with
// the cause), and every transition is an event of its status.
func (c *Core) wire(rt *Generator) {
	rt.policy = c.policy
	if len(rt.cfg.Allow) > 0 {
		c.allow.Store(true)
	}
	rt.state.Subscribe(func(t clockguard.Transition) {
		if t.From == clockguard.StateServing && t.To != clockguard.StateServing && rt.fair != nil {
			rt.fair.Interrupt()
		}
		rt.recordEvent(Event{At: t.At, From: t.From.String(), To: t.To.String(), Reason: t.Reason})
	})
}

// Start runs the core; see start.
func (c *Core) Start() error { return c.start() }

// Stop drains the core (every generator refuses at once with "shutting
// down") and ends it: the holders release their leases, lowering each
// reservation to the highest time produced.
func (c *Core) Stop() {
	c.Drain("shutting down")
	c.stop()
}

// Crash ends the core as a killed process would: nothing is released and
// nothing more is written (leases are left to expire), and the data dir
// keeps what it had.
func (c *Core) Crash() {
	c.crashed.Store(true)
	c.Drain("crashed")
	c.stop()
}

// The requests for IDs, one method per kind, which the gRPC and HTTP APIs
// (and programs embedding a Core) call: each looks the generator up ("" is
// the default), checks the count against the generator's bound, and
// issues — increasing, refused at once with the cause when the generator
// does not serve.

// NextID returns one ID of the named generator.
func (c *Core) NextID(ctx context.Context, generator string) (uint64, error) {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return 0, err
		}
	}
	rt, err := c.Lookup(generator)
	if err != nil {
		return 0, err
	}
	return rt.issueOne(ctx)
}

// IDs returns count IDs of the named generator; count runs from 1 to the
// generator's max_batch (GeneratorStatus.MaxBatch).
func (c *Core) IDs(ctx context.Context, generator string, count int64) ([]uint64, error) {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return nil, err
		}
	}
	rt, err := c.CheckBatch(generator, count)
	if err != nil {
		return nil, err
	}
	return rt.issueN(ctx, int(count))
}

// NextIDs is IDs into dst: len(dst) IDs, in a buffer the caller keeps.
func (c *Core) NextIDs(ctx context.Context, generator string, dst []uint64) error {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return err
		}
	}
	rt, err := c.CheckBatch(generator, int64(len(dst)))
	if err != nil {
		return err
	}
	return rt.issue(ctx, dst)
}

// NextRange returns count IDs of the named generator as runs of
// consecutive IDs: the same IDs, in the same order, IDs would return;
// count runs from 1 to the generator's max_range
// (GeneratorStatus.MaxRange).
func (c *Core) NextRange(ctx context.Context, generator string, count uint64) ([]generator.Run, error) {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return nil, err
		}
	}
	rt, err := c.CheckRange(generator, count)
	if err != nil {
		return nil, err
	}
	return rt.issueRuns(ctx, count)
}

// CheckRange is NextRange's check of its request, issuing nothing (HTTP
// HEAD): the generator exists and count is within its bounds.
func (c *Core) CheckRange(generator string, count uint64) (*Generator, error) {
	rt, err := c.Lookup(generator)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > rt.maxRange {
		return nil, BadField("count", strconv.FormatUint(count, 10), fmt.Sprintf("[1, %d]", rt.maxRange),
			"count %d outside [1, %d] for generator %q (sequence per unit × units in max-lead × workers)", count, rt.maxRange, rt.cfg.Name)
	}
	return rt, nil
}

// CheckBatch looks the named generator up and checks a batch's count
// against its max_batch: what a request for count IDs checks before it
// issues (and all that an HTTP HEAD does).
func (c *Core) CheckBatch(generator string, count int64) (*Generator, error) {
	rt, err := c.Lookup(generator)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > int64(rt.maxBatch) {
		return nil, BadField("count", strconv.FormatInt(count, 10), fmt.Sprintf("[1, %d]", rt.maxBatch),
			"count %d outside [1, %d] for generator %q (min(--max-batch, sequence per unit × units in max-lead))",
			count, rt.maxBatch, rt.cfg.Name)
	}
	return rt, nil
}

// Status is a snapshot of one generator ("" is the default), as Info and
// the status page show it.
func (c *Core) Status(generator string) (GeneratorStatus, error) {
	rt, err := c.Find(generator)
	if err != nil {
		return GeneratorStatus{}, err
	}
	wall, _ := c.clock.Now()
	return rt.Status(wall), nil
}

// Generators are the node's generators, the default first.
func (c *Core) Generators() []*Generator { return c.set.Load().list }

// OnAdd has f called with each generator the running core adds (a
// definition the coordinator holds, which the node's flags do not name),
// before it can serve: a node registers its health status and history.
// Call it before Start.
func (c *Core) OnAdd(f func(*Generator)) { c.onAdd = append(c.onAdd, f) }

// Policy is the node's clock policy, for what the transports show of it.
func (c *Core) Policy() *clockpolicy.Policy { return c.policy }

// Collectors are the core's own metrics (the holders'), for the node to
// register.
func (c *Core) Collectors() []prometheus.Collector { return c.hm.collectors() }

// NodeInfo is what the node writes in its owner records.
func (c *Core) NodeInfo() coordinator.NodeInfo { return c.nodeInfo }

// SetAddress records the node's bound gRPC address in its owner records;
// before Start.
func (c *Core) SetAddress(addr string) { c.nodeInfo.Address = addr }

// uncheckedWhy is why a node with cfg serves on an unchecked clock, ""
// when it does not (clockpolicy.Config.UncheckedWhy).
func uncheckedWhy(cfg Config) string {
	switch {
	case cfg.PrivateCoordinator:
		return "accepted on this node's own embedded coordinator"
	case cfg.UncheckedClockOK:
		return "accepted by --unchecked-clock-ok"
	}
	return ""
}

// Lookup finds a generator for a call that uses it ("" is the default):
// refused when retired, or while its stored definition is not known
// (definitionErr).
func (c *Core) Lookup(name string) (*Generator, error) {
	rt, err := c.Find(name)
	if err != nil {
		return nil, err
	}
	if err := rt.definitionErr(); err != nil {
		return nil, err
	}
	return rt, nil
}

// Find finds a generator to look at ("" is the default): its status, its
// state, its hold; refused only when unknown or retired. One whose stored
// definition is not known yet is found, not serving, with its reason.
func (c *Core) Find(name string) (*Generator, error) {
	set := c.set.Load()
	if name == "" {
		rt := set.list[0]
		if err := rt.retiredErr(); err != nil {
			return nil, err
		}
		return rt, nil
	}
	rt, ok := set.byName[name]
	if ok {
		if err := rt.retiredErr(); err != nil {
			return nil, err
		}
	}
	if !ok {
		names := make([]string, 0, len(set.list))
		for _, g := range set.list {
			names = append(names, g.cfg.Name)
		}
		if unread := c.defsUnread.Load(); unread != nil {
			return nil, &NotServingError{Generator: Echo(name), Code: clockguard.CodeStarting, RetryAfter: defsEvery,
				Reason: "reading the generators' definitions: " + *unread + " (until they are read, this node cannot tell whether the coordinator defines it; this node runs " + strings.Join(names, ",") + ")"}
		}
		why, _ := c.skipped.Load(name)
		s, _ := why.(string)
		return nil, &UnknownGeneratorError{Name: Echo(name), Known: strings.Join(names, ","), Skipped: s}
	}
	return rt, nil
}

// Authorize refuses a caller the named generator's allow list does not
// name (*PermissionError): the names of its verified client certificate
// (admission.CallerNames). An unknown name passes, to be refused as
// unknown by the call; so does every caller of a generator without a
// list. On a node without mTLS, a generator with a (stored) list is
// refused with its state's refusal: it is held for the list it cannot
// apply.
func (c *Core) Authorize(ctx context.Context, name string) error {
	if !c.allow.Load() {
		return nil
	}
	// The list as known, also of a generator retired or whose record
	// does not read (its list kept): checked before the call learns
	// either, as before anything else.
	set := c.set.Load()
	rt := set.byName[name]
	if name == "" {
		rt = set.list[0]
	}
	allow := []string(nil)
	if rt != nil {
		allow = rt.allowList()
	}
	if len(allow) == 0 {
		return nil
	}
	if !c.cfg.MutualTLS() {
		// A stored list on a node without mTLS: no caller can be named.
		// The generator is held for it (allowNeedsMTLS): the refusal is
		// its state's, as /readyz and health say, not the caller's.
		if err := rt.definitionErr(); err != nil {
			return err
		}
		if err := rt.refusal(); err != nil {
			return err
		}
	}
	for _, n := range admission.CallerNames(ctx) {
		if slices.Contains(allow, n) {
			return nil
		}
	}
	return &PermissionError{Generator: rt.cfg.Name}
}

// start runs the core: the clock checks first (every generator is held out
// until the first NTP verdict and the first peer comparison), then one
// holder per generator, the peer loop and the policy's probe loop. It
// returns at once; stop ends it.
func (c *Core) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	// The definitions first, before any holder can pin a generator: a
	// flag that disagrees with its stored definition stops the start; a
	// retired generator never answers, a listed one never answers others.
	// Until a generator's definition is read it waits, not started (the
	// read is tried again every defsEvery, and launchSettled starts it).
	defs, _ := c.coord.(coordinator.Definitions)
	var defsErr error
	if defs != nil {
		c.awaitDefinitions("not read yet")
		var dis *DisagreeError
		if defsErr = c.readDefinitions(ctx, defs); errors.As(defsErr, &dis) {
			return dis
		} else if defsErr != nil {
			c.log.Warn("generators' definitions not all read or applied: the generators concerned wait, not started, the others start; read again every "+defsEvery.String(), "err", defsErr)
		}
	}
	gens := c.Generators()
	for _, rt := range gens {
		if err := rt.state.Check(); err != nil {
			return err
		}
	}
	// The holders exist before anything that calls them (the clock
	// policy's inputs) starts; those of a generator whose definition is
	// not settled are made when it is.
	holders := map[*Generator][]*holder{}
	for _, rt := range gens {
		if rt.acc.Load().settled() {
			holders[rt] = c.prepare(ctx, rt)
		}
	}
	var err error
	c.steps, err = clockguard.NewStepDetector(c.clock, clockguard.DefaultStepConfig(),
		clockguard.WithStepCallback(c.policy.OnStep), clockguard.WithStepLogger(c.log))
	if err != nil {
		return err
	}
	c.policy.PollSteps = func() { c.steps.Poll() }
	if err := c.steps.Start(); err != nil {
		return err
	}
	if err := c.startNTP(); err != nil {
		return err
	}
	c.policy.WaitFirstPeers()
	for _, rt := range gens {
		if hs, ok := holders[rt]; ok {
			if err := c.launch(rt, hs); err != nil {
				return err
			}
		}
	}
	// From here on a generator the definitions add starts at once.
	c.addMu.Lock()
	c.runCtx = ctx
	c.addMu.Unlock()
	c.goRun(func() { c.peerLoop(ctx) })
	c.goRun(func() { c.policy.Run(ctx) })
	if defs != nil {
		c.goRun(func() { c.defsLoop(ctx, defs, defsErr) })
	}
	return nil
}

// prepare gives rt its run context (under ctx: cancelling it stops rt's
// holders, releasing their leases: retire) and the holders of its
// workers, not yet running: none for a segment or sequence generator, nor
// for one its definition retired.
func (c *Core) prepare(ctx context.Context, rt *Generator) []*holder {
	rt.runCtx, rt.stopRun = context.WithCancel(ctx)
	if rt.isSegment() || rt.retiredErr() != nil {
		return nil
	}
	ctx = rt.runCtx
	if !rt.isWide() {
		hd := c.newHolder(rt)
		hd.ls = directState{rt}
		rt.stepped = hd.stepped
		return []*holder{hd}
	}
	rt.stepped = func() {
		rt.wmu.Lock()
		ms := slices.Clone(rt.members)
		rt.wmu.Unlock()
		for _, m := range ms {
			m.hd.stepped()
		}
	}
	var hs []*holder
	for range rt.wantW.Load() {
		hs = append(hs, c.newMember(ctx, rt).hd)
	}
	return hs
}

// launch starts rt under its run context (prepare): a sequence
// generator's sections or a segment generator's source, else its holders
// and, under --workers auto, the loop that sizes them. A retired
// generator is drained instead.
func (c *Core) launch(rt *Generator, holders []*holder) error {
	ctx := rt.runCtx
	if err := rt.retiredErr(); err != nil {
		rt.state.Drain(err.Error())
		return nil
	}
	switch {
	case rt.isSeq():
		return c.startSeq(rt)
	case rt.isSegment():
		return c.startSegment(rt)
	}
	for _, hd := range holders {
		c.goRun(func() { hd.run(hd.ctx(ctx)) })
	}
	if rt.auto {
		c.goRun(func() {
			rt.autoWorkers(ctx, c.clock, func(n int) {
				for range n {
					m := c.newMember(ctx, rt)
					c.goRun(func() { m.hd.run(m.hd.ctx(ctx)) })
				}
			}, func(n int) { rt.dropMembers(n) })
		})
	}
	return nil
}

// newHolder is a holder of one worker lease of rt.
func (c *Core) newHolder(rt *Generator) *holder {
	return &holder{rt: rt, coord: c.coord, journal: c.journalFor(rt), clock: c.clock, policy: c.policy, log: c.log, m: c.hm, node: c.nodeInfo, crashed: &c.crashed,
		cfg: holderConfig{Datacenter: c.cfg.Datacenter, ReservationWindow: c.cfg.Timing.ReservationWindow,
			RefreshInterval: c.cfg.Timing.RefreshInterval, CoordinatorTimeout: c.cfg.Timing.Timeout,
			MaxClockOffset: c.cfg.MaxClockOffset, RestoreGuard: c.cfg.RestoreGuard(rt.cfg)}}
}

// newMember adds a holder to wide generator rt, with a context of its
// own under ctx (cancelling it releases the lease: dropMembers).
func (c *Core) newMember(ctx context.Context, rt *Generator) *member {
	hd := c.newHolder(rt)
	mctx, cancel := context.WithCancel(ctx)
	rt.wmu.Lock()
	m := &member{rt: rt, hd: hd, cancel: cancel, reasons: map[clockguard.Source]memberReason{}}
	if n := len(rt.members); n > 0 {
		m.slot = rt.members[n-1].slot + 1
	}
	rt.members = append(rt.members, m)
	rt.wmu.Unlock()
	hd.ls = m
	hd.runCtx = mctx
	hd.done = func() {
		rt.wmu.Lock()
		rt.members = slices.DeleteFunc(rt.members, func(x *member) bool { return x == m })
		rt.wmu.Unlock()
		rt.syncMembers()
	}
	return m
}

func (c *Core) goRun(f func()) {
	c.wg.Add(1)
	go func() { defer c.wg.Done(); f() }()
}

// startNTP starts the NTP checks of --ntp, holding every generator out
// until the first verdict; without --ntp it says loudly that drift is
// unchecked.
func (c *Core) startNTP() error {
	if len(c.cfg.NTP) == 0 {
		c.log.Warn("NO NTP CONFIGURED: clock drift is unchecked (set --ntp)")
		return nil
	}
	newNTP := c.newNTP
	if newNTP == nil {
		newNTP = func(report func(clockguard.NTPResult, error)) (ntpRunner, error) {
			nc, err := c.cfg.ntpConfig()
			if err != nil {
				return nil, err
			}
			ch, err := clockguard.NewNTPChecker(c.clock, nc, clockguard.WithNTPLogger(c.log), clockguard.WithNTPCallback(report))
			if err != nil {
				return nil, configErr("ntp", "%v", err)
			}
			return ch, nil
		}
	}
	var err error
	if c.ntp, err = newNTP(c.policy.OnNTP); err != nil {
		return err
	}
	c.policy.AskNTP = c.ntp.Trigger
	c.policy.WaitFirstNTP()
	return c.ntp.Start()
}

// peerLoop compares this node's clock with its live peers' heartbeats, as
// received: at once at start (retried every 200 ms until the coordinator
// answers), then about once a second.
func (c *Core) peerLoop(ctx context.Context) {
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.Timing.Timeout)
		beats, err := c.coord.Peers(pctx)
		cancel()
		if err != nil {
			if first {
				t.Reset(200 * time.Millisecond)
			} else {
				t.Reset(time.Second)
			}
			continue
		}
		countInUse(c.Generators(), beats)
		c.policy.OnPeers(c.nodeInfo.InstanceID, beats)
		first = false
		t.Reset(time.Second)
	}
}

// Drain takes every generator out of service for good (shutdown began):
// calls waiting in one are refused with the reason at once.
func (c *Core) Drain(reason string) {
	c.addMu.Lock()
	c.drained.Store(true)
	c.addMu.Unlock()
	for _, rt := range c.Generators() {
		rt.state.Drain(reason)
	}
	// A sequence generator's sections are freed as the drain begins (a
	// crash leaves them to their TTL), so that other nodes take them while
	// this one finishes its calls. All together: each is bounded by the
	// coordinator's timeout, and one after the other a coordinator that
	// does not answer would hold the drain that bound once per generator.
	var wg sync.WaitGroup
	for _, rt := range c.Generators() {
		if rt.seqm != nil {
			wg.Go(func() { c.stopSeq(rt) })
		}
	}
	wg.Wait()
}

// stop ends the core: the holders release their leases (lowering each
// reservation to the highest time produced), then the clock checks stop.
func (c *Core) stop() {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	if c.ntp != nil {
		c.ntp.Stop()
	}
	if c.steps != nil {
		c.steps.Stop()
	}
	// The hand-backs and section releases all together: each is bounded
	// by the coordinator's timeout, and one after the other a coordinator
	// that does not answer would hold the stop that bound once per
	// generator (this runs after the gRPC server's graceful stop).
	var wg sync.WaitGroup
	for _, rt := range c.Generators() {
		if rt.seg != nil {
			wg.Go(func() { c.stopSegment(rt) })
		}
		if rt.seqm != nil {
			wg.Go(func() { c.stopSeq(rt) })
		}
	}
	wg.Wait()
	for _, rt := range c.Generators() {
		if rt.ring != nil {
			rt.ring.Close()
		}
		rt.state.Stop()
	}
}

// Resume ends a manual-recovery hold (POST /admin/resume) and reports
// whether the generator was held; a generator not held is left alone.
func (c *Core) Resume(generatorName string) (bool, error) {
	rt, err := c.Find(generatorName)
	if err != nil {
		return false, err
	}
	return c.policy.Resume(policyGen{rt})
}

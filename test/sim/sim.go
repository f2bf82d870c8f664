// Package sim runs whole firn nodes — the real holders, generators, ring
// buffers, clock policy and serving states (core.Core) — on the memory
// coordinator, with fake NTP sources and injected clocks, through a fault
// schedule drawn from a seed, and checks firn's promises while it runs:
//
//   - every ID any caller received is unique, whether it came from NextIDs
//     or as a run of NextRange (ids.go);
//   - every ID lies at or below its worker's reservation in the
//     coordinator when it is received (a holder never issues past what it
//     reserved);
//   - every ID lies above its holder's floor and at or below what that
//     holder acknowledged, and one worker's holder intervals never
//     overlap, whichever node held them, a fresh node taking a worker
//     right after a coordinator restore included (holders.go);
//   - IDs increase per caller on one node, across NextIDs and NextRange,
//     in every layout the seeds run (the sequence below the node fields,
//     or above them as in sonyflake) and on wide nodes;
//   - a call is answered or refused at once: no call runs to its deadline
//     on a node that is not frozen;
//   - a refusal names its cause, and the cause is one the generator's
//     serving state held during the call: its code and its reason; a
//     generator whose state served through the whole call refuses nothing
//     as not serving (states.go);
//   - every size Info advertises is served: NextIDs up to max_batch and
//     NextRange up to max_range are refused as overloaded only while other
//     calls are queued;
//   - once every fault has ended, every node serves again within the
//     documented bound;
//   - every node also serves a segment generator (dense IDs from a counter
//     the coordinator keeps, segments.go), whose IDs are an ID space of
//     their own: each unique across all nodes and all time, within the
//     definition (start, max; some seeds use it up), and increasing per
//     caller on one node process, across NextIDs and the runs of
//     NextRange;
//   - clock faults never stop a segment generator: its serving state never
//     holds a clock cause, and its refusals never name one; they name a
//     cause its state held during the call, are never overloaded and
//     never run to their deadline; once every fault has ended it serves
//     again, unless used up;
//   - the segment IDs skipped add up: once every node has stopped, the
//     IDs the counter advanced by (next − start) are those its callers
//     received, those in its free ranges, and those lost by node processes
//     that ended (kill -9, a crash, a hand-back that failed), each process
//     losing exactly what its source held unused, plus the claims written
//     whose replies were lost; a graceful stop loses none unless the node
//     says its hand-back failed; every counter write acknowledged is in
//     the counter's history. Coordinator restores leave the counter alone
//     unless segmentRestores (the known gaps of restore detection);
//   - one seed in seqEvery also runs a per-key sequence generator on
//     every node (seqs.go): for each key, no value handed out twice, and
//     a call that returned before another began got values all below the
//     other's, across section moves, kills, pauses past the lease,
//     partitions and restores; a CurrentSeq at or above every value of
//     its key returned before it began; refusals WRONG_NODE,
//     SECTION_MOVING, a raise failing only while the coordinator is
//     faulted, or not serving for a cause held, never a clock cause; and
//     once every fault has ended, every node serves it and every section
//     has a serving owner;
//   - no wait spins: a loop that polls the clock without blocking, which
//     would stop virtual time, is found, ended and reported (stall.go);
//   - no goroutine outlives its node: a synctest bubble ends only when
//     every goroutine in it has, and reports those still blocked.
//
// Run it inside a testing/synctest bubble: every timer and sleep of the
// nodes, the coordinator and the schedule then runs in virtual time, and
// minutes of faults pass in milliseconds. The package is used by its own
// tests (go test ./test/sim), which also replay one seed with its trace.
package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/core"
)

// Options configure one run.
type Options struct {
	// Seed fixes the fault schedule (and the callers' choices).
	Seed int64
	// Virtual is how much virtual time the schedule spans (default 10m).
	Virtual time.Duration
	// Dir is where the nodes' data directories go (default: a fresh
	// directory under /dev/shm, else the system's temporary directory).
	Dir string
	// Log, when set, receives the nodes' logs.
	Log io.Writer
	// Stall, when set, ends and reports a busy loop that stops virtual
	// time; its Watch runs beside the run, outside the bubble (stall.go).
	Stall *Stall
	// SeqEvery: the seeds that run the sequence generator are those 1
	// modulo SeqEvery (1: every seed; 0: seqEvery, seqs.go).
	SeqEvery int
}

// Result is what a run found.
type Result struct {
	Seed       int64
	Violations []string // empty: every promise held
	Trace      []string // the schedule's events and the run's notable moments
	IDs        int      // snowflake IDs received and checked
	SegmentIDs uint64   // segment IDs received and checked (segments.go)
	SeqCalls   int      // sequence calls answered with values and checked (seqs.go)
	Calls      int
	Refused    int // calls refused at once (not serving, or a wait refused)
}

// Failed reports whether a promise was broken.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// violationKinds name the kinds of violations, by a phrase of their
// text, for the summary of a failed seed.
var violationKinds = []struct{ kind, phrase string }{
	// The segment checks' own (segments.go), first: their texts may
	// hold the phrases below.
	{"accounting", "accounting:"},
	{"clock", "clock cause"},
	{"bounds", "outside the definition"},
	{"cause", "not a cause of a segment generator"},
	{"duplicate", "issued twice"},
	{"no-recovery", "after every fault ended"},
	{"busy-loop", "busy loop"},
	{"holder-overlap", "holder intervals of"},
	{"holder-bounds", "holder's floor"},
	// The holder checks' own words (holders.go), not "acknowledged"
	// alone: the reasons a refusal quotes say it too ("no renewal
	// acknowledged", "… saw 9 acknowledged"), and a refusal's violation
	// would then pass for the catch of a weakened fence (test/run.sh).
	{"holder-bounds", "it had acknowledged"},
	{"holder-bounds", "closed holder's acknowledged"},
	{"holder-bounds", "never held"},
	{"above-reservation", "above its worker's reservation"},
	{"order", "not increasing per caller"},
	{"range-count", "returned"},
	{"refused-while-serving", "served throughout the call"},
	{"cause-not-held", "did not hold during the call"},
	{"refused-idle", "refused on an idle node"},
	{"refused-bad-request", "refused as a bad request"},
	{"deadline", "ran to its deadline"},
	{"deadline-early", "its deadline not reached"},
	{"clock-wait", "wait on the clock beyond"},
	{"slow", "answered after"},
	{"slow", "refused only after"},
	{"bump", "the bump left"},
}

// kindOf is the kind of a violation, by its text; a violation of a
// segment check (its text names the segment generator) is a kind apart:
// "segment-duplicate", "segment-order", ….
func kindOf(v string) string {
	if strings.Contains(v, seqName) {
		return "seq-" + seqKindOf(v)
	}
	prefix := ""
	if strings.Contains(v, segName) {
		prefix = "segment-"
	}
	for _, k := range violationKinds {
		if strings.Contains(v, k.phrase) {
			return prefix + k.kind
		}
	}
	return prefix + "other"
}

// KindCounts counts the violations by kind, kinds in the order of their
// first violation.
func (r *Result) KindCounts() (kinds []string, counts map[string]int) {
	counts = map[string]int{}
	for _, v := range r.Violations {
		kind := kindOf(v)
		if counts[kind] == 0 {
			kinds = append(kinds, kind)
		}
		counts[kind]++
	}
	return kinds, counts
}

// Kinds counts the violations by kind: "order ×3, refused-idle ×120".
func (r *Result) Kinds() string {
	kinds, counts := r.KindCounts()
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = fmt.Sprintf("%s ×%d", k, counts[k])
	}
	return strings.Join(out, ", ")
}

// Report is the failure's text: the violations, then the trace.
func (r *Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violation(s):\n", r.Seed, len(r.Violations))
	shown := map[string]bool{}
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "  … and %d more; the first of each other kind:\n", len(r.Violations)-i)
			break
		}
		shown[kindOf(v)] = true
		fmt.Fprintf(&b, "  %s\n", v)
	}
	for _, v := range r.Violations[min(10, len(r.Violations)):] {
		if k := kindOf(v); !shown[k] {
			shown[k] = true
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	fmt.Fprintf(&b, "  kinds: %s\n", r.Kinds())
	b.WriteString("trace:\n")
	for _, e := range r.Trace {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

// era moves the bubble's virtual clock (which starts at 2000-01-01) to a
// time the layouts accept.
var era = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))

const (
	generatorName = "default"
	callDeadline  = 2 * time.Second
	// answerBound is how long a call may take, answered or refused, on a
	// node that is not frozen: its deadline, which no call may reach (one
	// reservation write is two coordinator timeouts of 1 s).
	answerBound = callDeadline
	// bulkFrom: a call for more IDs than this (the sizes up to max_batch
	// and max_range) takes, beside the above, the time to produce them.
	bulkFrom = 4096
)

// production is what a call of count IDs adds to its deadline and its
// bound beyond bulkFrom: twice the time one worker takes to make them, as
// the node may have to wait for the clock for all of them (its lead used
// up by the call before) while the ring's filler and the other callers
// take their share, and fewer workers than the node wants may serve.
func (w *world) production(count uint64) time.Duration {
	if count <= bulkFrom {
		return 0
	}
	return 2 * time.Duration(float64(count)/w.layout.Rate()*float64(time.Second))
}

// world is one run.
type world struct {
	o     Options
	rng   *rand.Rand
	store *memory.Store
	// cstore keeps the segment generator's counter (segments.go).
	cstore *memory.Store
	// qstore keeps the sequence generator's leases and counter (seqs.go).
	qstore *memory.Store
	segDef segment.Definition
	base   clockguard.Clock
	layout generator.Layout
	shape  idShape // the layout's fields, as the ID checks cut IDs
	spec   string
	ntp    bool       // nodes run with an NTP source
	xr     *rand.Rand // the schedule's draws beside its faults
	// workers is each node's --workers (wide generators).
	workers int
	dir     string
	log     *slog.Logger

	mu          sync.Mutex
	start       time.Time
	nodes       []*node                          // the nodes, the fresh ones that joined included
	fresh       int                              // fresh nodes made
	issued      map[coordinator.Slot][]keyRun    // every ID received, as runs per worker (ids.go)
	restores    int                              // bumps the epoch of the reservation check
	restoredAt  time.Time                        // the last restore: holders run above the store's values until they notice
	bumpedTo    time.Time                        // nodes may wait until about here for a bump's floor
	holders     map[holderKey][]*interval        // each node's holder intervals per worker (holderEvent)
	closed      map[coordinator.Slot][]*interval // every closed interval, per worker
	unconfirmed time.Duration                    // the largest clock lead a node started with and could not check
	ntpOffset   time.Duration
	ntpSilent   bool
	violations  []string
	trace       []string
	ids, calls  int
	refused     int
	// The segment generator (segments.go): every ID received, as runs
	// (sorted, disjoint); how many; the counter writes asked for; each
	// node process's figures; the restores of the counters.
	segIssued   []keyRun
	segIDs      uint64
	swaps       []swapRec
	segLives    []*segLife
	segRestored int
	// segAtRestore: the counter as the last restore left it (nil: it
	// could not be read), what the operator's bump is sized from while
	// a marker keeps the counter from being read.
	segAtRestore *segment.Counter
	segWarned    map[string]int // per node name: hand-backs it said failed
	// The sequence generator (seqs.go): the node processes by name (a
	// refusal names the owner to call), and what its checks keep.
	byName map[string]*node
	seqRun bool // this seed's nodes serve the sequence generator
	seq    seqWorld
}

// Run runs one seed. Call it inside a testing/synctest bubble.
func Run(o Options) (*Result, error) {
	if o.Virtual == 0 {
		o.Virtual = 10 * time.Minute
	}
	w := &world{o: o, rng: rand.New(rand.NewSource(o.Seed)), issued: map[coordinator.Slot][]keyRun{}, start: time.Now(),
		holders: map[holderKey][]*interval{}, closed: map[coordinator.Slot][]*interval{}, segWarned: map[string]int{},
		byName: map[string]*node{}}
	w.base = newSimClock(era, o.Stall)
	w.log = slog.New(slog.DiscardHandler)
	if o.Log != nil {
		w.log = slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	dir := o.Dir
	if dir == "" {
		root := "/dev/shm"
		if st, err := os.Stat(root); err != nil || !st.IsDir() {
			root = os.TempDir()
		}
		d, err := os.MkdirTemp(root, "firn-sim-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	w.dir = dir
	w.store = memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: w.log,
		Incarnation: func(string) string { return fmt.Sprintf("sim-%d", o.Seed) }})
	w.cstore = memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: w.log,
		Incarnation: func(string) string { return fmt.Sprintf("sim-%d", o.Seed) }})
	w.qstore = memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: w.log,
		Incarnation: func(string) string { return fmt.Sprintf("sim-%d", o.Seed) }})
	w.segDef = segDefinition(o.Seed)
	w.seqRun = seqSeed(o.Seed, o.SeqEvery)

	sc := w.plan()
	for _, n := range w.nodes {
		if err := n.startNode(false); err != nil {
			return nil, err
		}
	}
	sc.run(w)
	w.settle()
	for _, n := range w.nodes {
		n.stopNode(true)
	}
	w.segAccount()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seqCheckLocked()
	if msg := o.Stall.report(w.start); msg != "" {
		w.violations = append([]string{msg}, w.violations...)
	}
	return &Result{Seed: o.Seed, Violations: w.violations, Trace: w.trace, IDs: w.ids, Calls: w.calls, Refused: w.refused,
		SegmentIDs: w.segIDs, SeqCalls: w.seq.rec.Len()}, nil
}

// since is the virtual time since the run began, for the trace.
func (w *world) since() time.Duration { return time.Since(w.start).Round(time.Millisecond) }

func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	w.trace = append(w.trace, fmt.Sprintf("%9v  ", w.since())+fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *world) violate(format string, args ...any) {
	w.mu.Lock()
	w.violateLocked(format, args...)
	w.mu.Unlock()
}

// violateLocked is violate with w.mu held.
func (w *world) violateLocked(format string, args ...any) {
	msg := fmt.Sprintf("%9v  ", w.since()) + fmt.Sprintf(format, args...)
	w.violations = append(w.violations, msg)
	w.trace = append(w.trace, "VIOLATION "+msg)
}

// --- nodes ------------------------------------------------------------------

type node struct {
	w     *world
	name  string
	dir   string
	clock *clockguard.Offset

	mu      sync.Mutex
	client  *memory.Client
	cclient *memory.Client       // of the counter store
	qclient *memory.Client       // of the sequence store
	qhist   *stateLog            // this life's sequence generator's states
	thaw    chan struct{}        // while frozen: closed when it thaws or stops
	frozeAt time.Time            // when it was frozen last
	info    coordinator.NodeInfo // this life's, as its leases name it
	seg     *segLife             // this life's segment generator
	core    *core.Core
	ntp     *fakeNTP
	up      bool
	frozen  bool
	paused  bool // its callers are idle
	burst   bool // its callers ask for large batches
	life    int  // incremented at every start: callers belong to one life
	stop    chan struct{}
	callers sync.WaitGroup
	// inflight is the calls of its callers in progress, starts how many
	// began: a call during which no other was in flight found the node
	// idle.
	inflight int
	starts   uint64
}

func (w *world) newNode(i int) *node {
	return &node{w: w, name: fmt.Sprintf("n%d", i), dir: fmt.Sprintf("%s/n%d-0", w.dir, i),
		clock: clockguard.NewOffset(w.base, 0)}
}

// freshNode is a node that joins during the run, on an empty data dir.
func (w *world) freshNode() *node {
	w.fresh++
	name := fmt.Sprintf("f%d", w.fresh)
	return &node{w: w, name: name, dir: fmt.Sprintf("%s/%s-0", w.dir, name), clock: clockguard.NewOffset(w.base, 0)}
}

// startNode starts the node's core on its data dir (a fresh one when
// wipe), with two callers.
func (n *node) startNode(wipe bool) error {
	w := n.w
	n.mu.Lock()
	defer n.mu.Unlock()
	if wipe {
		n.life++
		n.dir = fmt.Sprintf("%s/%s-%d", w.dir, n.name, n.life)
	}
	n.life++
	cfg := core.DefaultConfig()
	cfg.Cluster = "sim"
	cfg.RingSize = 1024
	// A coarser freshness tick (a quarter of max-staleness) than the
	// default's 25 ms: the ring's filler wakes on it while it holds IDs,
	// and those wake-ups are most of a run's events.
	cfg.MaxStaleness = time.Second
	def, qdef := w.segDef, seqDefinition()
	cfg.Generators = []core.GeneratorConfig{{Name: generatorName, Layout: w.layout}, {Name: segName, Segment: &def}}
	if w.seqRun {
		cfg.Generators = append(cfg.Generators, core.GeneratorConfig{Name: seqName, Segment: &qdef})
	}
	cfg.Workers = w.workers
	if w.ntp {
		cfg.NTP = []string{"127.0.0.1:123"}
		cfg.NTPInterval = time.Minute
	} else {
		// Without NTP, fewer than three live nodes leave the clock
		// unchecked, which a node refuses by default (CLOCK_UNCHECKED):
		// accepted here, so that the nodes started ahead with nothing to
		// check them, and what they leave behind, are still exercised. With
		// NTP (not required) the refusal is exercised while NTP is silent.
		cfg.UncheckedClockOK = true
	}
	wall, _ := n.clock.Now()
	if off := n.clock.CurrentOffset(); off > cfg.MaxClockOffset && !w.ntp {
		// Started with its clock ahead and no NTP: only peers that hold
		// a worker at that moment can check it, and there may be none
		// (fewer than three nodes; or none holds, after a restore or
		// while a bump's floor is ahead). The node then serves at that
		// time (with a warning), and once the clock is put right it
		// fails closed until the clock reaches its reservation
		// (docs/clock-policy.md): the documented outage, not a broken promise.
		// settle waits it out.
		w.mu.Lock()
		w.unconfirmed = max(w.unconfirmed, off)
		w.mu.Unlock()
		w.note("%s starts with its clock %v ahead and no NTP", n.name, off)
	}
	if err := cfg.Finish(wall); err != nil {
		return err
	}
	st, err := datadir.Open(n.dir)
	if err != nil {
		return err
	}
	n.client = w.store.Connect(n.clock)
	n.cclient = w.cstore.Connect(n.clock)
	n.qclient = w.qstore.Connect(n.clock)
	key := fmt.Sprintf("%s/%d", n.name, n.life)
	coord := &simCoord{Client: n.client, counters: n.cclient, seqs: n.qclient, w: w, who: key}
	info := coordinator.NodeInfo{Name: n.name, InstanceID: st.InstanceID(), Address: n.name + ":7300", StartTime: wall}
	log := slog.New(&holderLog{w: w, node: n.name, next: w.log.Handler()}).With("node", n.name)
	opts := []core.Option{core.WithLogger(log)}
	if w.ntp {
		opts = append(opts, core.WithNTPRunner(func(report func(clockguard.NTPResult, error)) (core.NTPRunner, error) {
			n.ntp = &fakeNTP{verdict: n.ntpVerdict, report: report, trigger: make(chan struct{}, 1)}
			return n.ntp, nil
		}))
	}
	nc, err := core.New(cfg, coord, st, n.clock, info, opts...)
	if err != nil {
		n.client.Close()
		n.cclient.Close()
		n.qclient.Close()
		return err
	}
	hist := &stateLog{gen: generatorName}
	shist := &stateLog{gen: segName, onEntry: n.checkSegState}
	hists := []*stateLog{hist, shist}
	var qhist *stateLog
	if w.seqRun {
		qhist = &stateLog{gen: seqName, onEntry: n.checkSeqState}
		hists = append(hists, qhist)
	}
	for _, h := range hists {
		if err := h.watch(nc); err != nil {
			n.client.Close()
			n.cclient.Close()
			n.qclient.Close()
			return err
		}
	}
	life := &segLife{key: key}
	w.mu.Lock()
	w.segLives = append(w.segLives, life)
	w.byName[n.name] = n
	w.mu.Unlock()
	// Started without n.mu: Start waits on the coordinator (virtual
	// time), and a goroutine blocked on n.mu meanwhile (another node's
	// sequence caller asking for this node, seqTargetOf; a caller of its
	// last life counting itself out) is not durably blocked, so virtual
	// time would stand still with the start waiting on it. n.up is false
	// until the start ends: the callers see the node down meanwhile.
	n.mu.Unlock()
	err = nc.Start()
	n.mu.Lock()
	if err != nil {
		return err
	}
	n.core, n.up, n.frozen, n.seg, n.qhist, n.info = nc, true, false, life, qhist, info
	n.stop = make(chan struct{})
	for c := range 2 {
		n.callers.Add(1)
		go n.caller(fmt.Sprintf("%s/%d/c%d", n.name, n.life, c), nc, hist, n.stop, n.life)
	}
	n.callers.Add(1)
	go n.segCaller(fmt.Sprintf("%s/%d/%s", n.name, n.life, segName), nc, shist, n.stop, life)
	if w.seqRun {
		n.callers.Add(1)
		go n.seqCaller(fmt.Sprintf("%s/%d/%s", n.name, n.life, seqName), n.stop)
	}
	return nil
}

// stopNode ends the node: gracefully (its leases released) or as a kill.
func (n *node) stopNode(graceful bool) {
	n.mu.Lock()
	if !n.up {
		n.mu.Unlock()
		return
	}
	n.up = false
	close(n.stop)
	nc, client, cclient, qclient, frozen, life := n.core, n.client, n.cclient, n.qclient, n.frozen, n.seg
	n.mu.Unlock()
	if frozen {
		client.Thaw()
		cclient.Thaw()
		qclient.Thaw()
	}
	n.thawed()
	n.callers.Wait()
	w := n.w
	if graceful {
		w.mu.Lock()
		warned := w.segWarned[n.name]
		w.mu.Unlock()
		nc.Stop()
		w.mu.Lock()
		warned = w.segWarned[n.name] - warned
		w.mu.Unlock()
		w.segEnded(life, nc, true, warned > 0)
		client.Close()
		cclient.Close()
		qclient.Close()
		return
	}
	client.Kill()
	cclient.Kill()
	qclient.Kill()
	nc.Crash()
	w.segEnded(life, nc, false, false)
	client.Close()
	cclient.Close()
	qclient.Close()
}

// caller asks its node for IDs until stop, checking every answer. Most
// calls ask NextIDs for 1 to 1000 IDs (4096 in a burst); some ask for the
// sizes Info advertises — NextIDs of any count up to max_batch and exactly
// max_batch, NextRange of exactly max_range and of sizes between the
// admission queue's bound and max_range — and some ask NextRange for the
// ordinary counts: one caller's IDs increase across both.
func (n *node) caller(id string, nc *core.Core, hist *stateLog, stop <-chan struct{}, life int) {
	defer n.callers.Done()
	w := n.w
	var last uint64
	rng := rand.New(rand.NewSource(w.o.Seed ^ int64(len(id))*7919 ^ int64(life)))
	// The shape of the call (which API, which of the sizes Info
	// advertises) from a source of its own, so that the counts and
	// pauses drawn from rng stay what they were.
	h := fnv.New64a()
	h.Write([]byte(id))
	xr := rand.New(rand.NewSource(w.o.Seed*104729 ^ int64(h.Sum64()>>1)))
	st, err := nc.Status(generatorName)
	if err != nil {
		w.violate("%s: Status: %v", id, err)
		return
	}
	maxBatch, maxRange := st.MaxBatch, st.MaxRange
	// The admission queue's bound (--max-queue of the widest output, at
	// least one max batch: Config.MaxQueueFor).
	queueBound := uint64(max(int64(w.layout.Rate()*float64(w.workers)*core.DefaultConfig().MaxQueue.Seconds()), int64(maxBatch)))
	var buf []uint64   // reused: received keeps pieces, not the slice
	var pieces []piece // reused
	var cut piecer
	for {
		n.mu.Lock()
		paused, burst, frozen := n.paused, n.burst, n.frozen
		n.mu.Unlock()
		pause := time.Duration(100+rng.Intn(900)) * time.Millisecond
		if paused || frozen {
			pause = 500 * time.Millisecond
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
		if paused || frozen {
			continue
		}
		count, ranged := callShape(rng, xr, burst, maxBatch, maxRange, queueBound)
		what := fmt.Sprintf("NextIDs(%d)", count)
		if ranged {
			what = fmt.Sprintf("NextRange(%d)", count)
		}
		w.mu.Lock()
		epoch := w.restores
		w.mu.Unlock()
		// The states of the call: from mark on, what its transitions
		// record; pre, the state it starts in.
		mark := hist.mark()
		pre, err := nc.StateSnapshot(generatorName)
		if err != nil {
			w.violate("%s: StateSnapshot: %v", id, err)
			return
		}
		others, starts := n.callBegins()
		bound := answerBound + w.production(count)
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline+w.production(count))
		began := time.Now()
		var runs []generator.Run
		var dst []uint64
		if ranged {
			runs, err = nc.NextRange(ctx, generatorName, count)
		} else {
			if uint64(cap(buf)) < count {
				buf = make([]uint64, count)
			}
			dst = buf[:count]
			err = nc.NextIDs(ctx, generatorName, dst)
		}
		took := time.Since(began)
		cancel()
		idle, frozenNow, upNow := n.callEnds(others, starts)
		w.callDone()
		if err != nil {
			n.checkRefusal(refusal{who: id, what: what, err: err, took: took, frozen: frozenNow || frozen, up: upNow,
				bound: bound, idle: idle, core: nc, hist: hist, pre: entryOf(pre), mark: mark})
			continue
		}
		if took > bound && !frozenNow {
			w.violate("%s: %s answered after %v (bound %v)", id, what, took, bound)
		}
		pieces = pieces[:0]
		if ranged {
			last = w.checkRuns(id, what, last, count, runs)
			pieces = w.shape.runPieces(&cut, pieces, runs)
		} else {
			last = w.checkIDs(id, what, last, dst)
			pieces = w.shape.idPieces(&cut, pieces, dst)
		}
		w.received(id, pieces, epoch)
	}
}

// callBegins counts a call of the node's callers in flight; it returns
// how many others were, and how many had begun before it.
func (n *node) callBegins() (others int, starts uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	others, starts = n.inflight, n.starts
	n.inflight++
	n.starts++
	return others, starts
}

// callEnds counts the call out (callBegins' others and starts): idle when
// no other call of the node's callers was in flight at any moment of it,
// so nothing else was queued; and whether the node is frozen and up now.
func (n *node) callEnds(others int, starts uint64) (idle, frozen, up bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inflight--
	return others == 0 && n.starts == starts+1, n.frozen, n.up
}

// callDone counts a call answered.
func (w *world) callDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
}

// restoredSinceLocked is whether a restore of the coordinator began
// since epoch (w.restores when the call began) or less than 5 s ago
// (w.mu held): a holder's reservation acknowledged before it stands
// above what the restored coordinator shows until the holder's next
// write (a second) finds it out. A restore counts from before the store
// is restored (schedule.go), so that a check that reads the store under
// w.mu sees either the store before the restore or the restore counted.
func (w *world) restoredSinceLocked(epoch int) bool {
	return w.restores != epoch || (!w.restoredAt.IsZero() && time.Since(w.restoredAt) < 5*time.Second)
}

// callShape draws one call's count and whether it asks NextRange: 1 to
// 1000 IDs (4096 in a burst) from rng; from xr, one call in 200 asks for
// a size Info advertises (max_batch, up to max_batch, max_range, between
// the queue bound and max_range), one in 13 for the ordinary counts as a
// range.
func callShape(rng, xr *rand.Rand, burst bool, maxBatch int, maxRange, queueBound uint64) (count uint64, ranged bool) {
	count = uint64([]int{1, 1, 10, 100, 1000}[rng.Intn(5)])
	if burst {
		count = 4096
	}
	switch k := xr.Intn(800); {
	case k == 0:
		count = uint64(maxBatch)
	case k == 1:
		count = 1 + uint64(xr.Intn(maxBatch))
	case k == 2:
		count, ranged = maxRange, true
	case k == 3:
		count, ranged = maxRange, true
		if queueBound+1 < maxRange {
			count = queueBound + 1 + uint64(xr.Int63n(int64(maxRange-queueBound-1)))
		}
	case k < 64:
		ranged = true
	}
	return count, ranged
}

// checkRuns checks one NextRange answer of caller id: count IDs, every
// run above the caller's last ID before it; it returns the new last.
func (w *world) checkRuns(id, what string, last, count uint64, runs []generator.Run) uint64 {
	got := uint64(0)
	bad := false
	for _, r := range runs {
		if (r.Count == 0 || r.First <= last) && !bad {
			bad = true
			w.violate("%s: %s: run of %d from %d after ID %d (not increasing per caller)", id, what, r.Count, r.First, last)
		}
		if r.Count > 0 {
			last = r.First + r.Count - 1
		}
		got += r.Count
	}
	if got != count {
		w.violate("%s: %s returned %d IDs", id, what, got)
	}
	return last
}

// checkIDs checks one NextIDs answer of caller id: increasing, above the
// caller's last ID before it; it returns the new last.
func (w *world) checkIDs(id, what string, last uint64, dst []uint64) uint64 {
	for _, x := range dst {
		if x <= last {
			w.violate("%s: %s: ID %d after %d (not increasing per caller)", id, what, x, last)
			break
		}
		last = x
	}
	return max(last, dst[len(dst)-1])
}

// refusal is one failed call, with what its check needs.
type refusal struct {
	who, what   string
	err         error
	took, bound time.Duration // how long it took, and may take
	frozen, up  bool
	// idle: no other call of the node's callers was in flight meanwhile.
	idle bool
	// The generator's states: pre, read just before the call, and those
	// recorded in hist from mark on.
	core *core.Core
	hist *stateLog
	pre  stateEntry
	mark int
	// alt, when set, is a second reason the refusal may name for a
	// state's (a known bug's excuse: segments.go).
	alt func(reason string) string
}

// checkRefusal checks a failed call: refused at once, with a cause the
// generator's state held during the call. A node that says it serves
// answers within the bound: a refusal for the clock or a reservation
// means it could not (docs/design.md, Liveness rules), as does a call
// that runs to its deadline; a generator whose state served through the
// whole call refuses nothing as not serving; and a size Info advertises
// (max_batch, max_range) is refused as overloaded only when other calls
// are queued (docs/design.md, Overload).
func (n *node) checkRefusal(r refusal) {
	w := n.w
	w.mu.Lock()
	w.refused++
	w.mu.Unlock()
	if r.frozen || !r.up {
		return // a stopped process's calls say nothing
	}
	id, err := r.who, r.err
	var ns *core.NotServingError
	var ov *admission.OverloadedError
	var bad *core.RequestError
	switch {
	case errors.As(err, &ns):
		if strings.TrimSpace(ns.Reason) == "" {
			w.violate("%s: %s refused without a cause: %v", id, r.what, err)
		}
		if !slices.Contains(clockguard.Codes, ns.Code) {
			w.violate("%s: %s refused with code %q, not one of the API's reasons: %v", id, r.what, ns.Code, err)
		}
		n.checkHeld(r, ns)
	case errors.Is(err, generator.ErrHeld):
		// The serving state's refusal, before the node named it: only
		// while the state does not serve.
		if states := r.hist.callStates(r.core, r.pre, r.mark, 1000); servedThroughout(states) {
			w.violate("%s: %s refused %v while its generator's state served throughout the call", id, r.what, err)
		}
	case errors.Is(err, generator.ErrRollback), errors.Is(err, generator.ErrForwardStep),
		errors.Is(err, generator.ErrClockRange), errors.Is(err, generator.ErrRetired):
		// The generator names the cause itself, before the state does.
	case errors.Is(err, generator.ErrAhead):
		w.violate("%s: %s refused after %v for a wait on the clock beyond the call's deadline while serving: %v", id, r.what, r.took, err)
	case errors.Is(err, generator.ErrReservation), errors.Is(err, context.DeadlineExceeded):
		w.violate("%s: %s: a call ran to its deadline (%v): %v", id, r.what, r.took, err)
	case errors.As(err, &ov):
		if r.idle {
			w.violate("%s: %s refused on an idle node (no other call queued), a size Info advertises: %v", id, r.what, err)
		}
	case errors.As(err, &bad):
		w.violate("%s: %s refused as a bad request, a size Info advertises: %v", id, r.what, err)
	case errors.Is(err, ringbuffer.ErrNoSource), errors.Is(err, ringbuffer.ErrClosed):
		// The API names these (LEASE_LOST, DRAINING: server/errors.go).
	default:
		// Any other error reaches the caller without an ErrorInfo reason
		// (server/errors.go, describe): a refusal that does not say why.
		w.violate("%s: %s refused with an error naming no cause: %v", id, r.what, err)
	}
	if r.took > r.bound {
		w.violate("%s: %s refused only after %v: %v", id, r.what, r.took, err)
	}
}

// checkHeld requires a refusal "not serving" to name a cause the
// generator's state held during the call: its code and its reason.
func (n *node) checkHeld(r refusal, ns *core.NotServingError) {
	w := n.w
	states := r.hist.callStates(r.core, r.pre, r.mark, 1000)
	if servedThroughout(states) {
		w.violate("%s: %s refused %s %q while its generator's state served throughout the call (not serving needs a cause held)",
			r.who, r.what, ns.Code, ns.Reason)
		return
	}
	held := func(states []stateEntry) bool {
		return heldDuring(states, ns.Code, ns.Reason) || r.alt != nil && heldDuring(states, ns.Code, r.alt(ns.Reason))
	}
	if held(states) {
		return
	}
	// The deliveries of changes made just before the answer may still be
	// on their way: wait longer, then judge.
	states = r.hist.callStates(r.core, r.pre, r.mark, 100000)
	if !held(states) {
		w.violate("%s: %s refused %s %q, a cause its generator's state did not hold during the call (its states: %s)",
			r.who, r.what, ns.Code, ns.Reason, describeStates(states))
	}
}

// --- NTP --------------------------------------------------------------------

// fakeNTP is a node's NTP source: its verdict (a node's: ntpVerdict)
// compares the node's clock with the true time, shifted by the world's
// NTP offset, or says the servers are unreachable while the world's NTP
// is silent. It checks once a minute, after a second while failing, and
// at once on Trigger, as the real checker does.
type fakeNTP struct {
	verdict func() (clockguard.NTPResult, error)
	report  func(clockguard.NTPResult, error)
	trigger chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func (f *fakeNTP) Start() error {
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	go f.loop()
	return nil
}

func (f *fakeNTP) Stop() {
	close(f.stop)
	<-f.done
}

func (f *fakeNTP) Trigger() {
	select {
	case f.trigger <- struct{}{}:
	default:
	}
}

func (f *fakeNTP) loop() {
	defer close(f.done)
	for {
		res, err := f.verdict()
		f.report(res, err)
		next := time.Minute
		if err != nil {
			next = clockguard.NTPRetryInterval
		}
		t := time.NewTimer(next)
		select {
		case <-f.stop:
			t.Stop()
			return
		case <-t.C:
		case <-f.trigger:
			t.Stop()
		}
	}
}

// ntpVerdict is the node's NTP verdict now (fakeNTP).
func (n *node) ntpVerdict() (clockguard.NTPResult, error) {
	w := n.w
	wall, mono := n.clock.Now()
	truth, _ := w.base.Now()
	w.mu.Lock()
	offset, silent := w.ntpOffset, w.ntpSilent
	w.mu.Unlock()
	limit := 250 * time.Millisecond
	res := clockguard.NTPResult{At: wall, StartMono: mono, Limit: limit, Need: 1}
	if silent {
		return res, fmt.Errorf("%w: 0 of 1 servers usable (sim: silent)", clockguard.ErrNTPUnreachable)
	}
	res.Valid = 1
	res.Offset = wall.Sub(truth) - offset
	if res.Offset > limit || res.Offset < -limit {
		return res, &clockguard.OffsetError{Offset: res.Offset, Limit: limit}
	}
	res.OK = true
	return res, nil
}

// --- the end ----------------------------------------------------------------

// settle ends every fault, then requires every running node to serve
// again, and to answer, within the bound.
func (w *world) settle() {
	w.note("settle: every fault ends")
	w.faults(func(f *memory.Faults) { f.Clear() })
	w.mu.Lock()
	w.ntpOffset, w.ntpSilent = 0, false
	w.mu.Unlock()
	for _, n := range w.nodes {
		n.mu.Lock()
		n.paused, n.burst = false, false
		frozen, client, cclient, qclient := n.frozen, n.client, n.cclient, n.qclient
		n.frozen = false
		n.mu.Unlock()
		n.thawed()
		n.clock.SetOffset(0)
		if frozen {
			client.Thaw()
			cclient.Thaw()
			qclient.Thaw()
		}
		if n.ntp != nil {
			n.ntp.Trigger()
		}
	}
	// A node whose logical time ran ahead (a forward step accepted, then
	// undone) serves once the clock caught up: at most the largest step
	// the schedule accepts without confirmation, plus the window.
	bound := 20 * time.Second
	w.mu.Lock()
	wait, lead := time.Until(w.bumpedTo), w.unconfirmed
	w.mu.Unlock()
	bound += lead
	if wait > 0 {
		// A bump by D sets the floor D above the highest reservation, and
		// holds the generator for about D plus the window past that. The
		// schedule's bumps are seconds and its reservations stand within
		// max-lead of the clock, but for a node that started ahead with
		// nothing to check it against; a bump asking for more than that
		// is a bug of its own (a gap counted from the epoch).
		if most := time.Minute + lead; wait > most {
			w.violate("the bump left the generator waiting %v for its floor", wait)
			wait = most
		}
		bound = max(bound, 20*time.Second+wait)
	}
	deadline := time.Now().Add(bound)
	for _, n := range w.nodes {
		n.mu.Lock()
		up, nc := n.up, n.core
		n.mu.Unlock()
		if !up {
			continue
		}
		for {
			st, _ := nc.Status(generatorName)
			if st.Serving {
				break
			}
			if time.Now().After(deadline) {
				w.violate("%s: not serving %v after every fault ended: %s", n.name, bound, st.Reason)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The segment generator: no clock in it, so the coordinator's
		// second is its bound, well within the snowflake's.
		for {
			ok, why := w.segSettled(nc)
			if ok {
				break
			}
			if time.Now().After(deadline) {
				w.violate("%s: %s not serving %v after every fault ended: %s", n.name, segName, bound, why)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The sequence generator: no clock in it either.
		for w.seqRun {
			ok, why := w.seqSettled(n, nc)
			if ok {
				break
			}
			if time.Now().After(deadline) {
				w.violate("%s: %s not serving %v after every fault ended: %s", n.name, seqName, bound, why)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Every section of the sequence generator has a serving owner.
	for w.seqRun {
		missing := w.seqUnserved()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			w.violate("%s: sections %v have no serving owner %v after every fault ended (%s)", seqName, missing, bound, w.seqOwnersOf(missing))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the callers' answers after recovery are checked too
}

// sortedNames is for stable traces.
func sortedNames(ns []*node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.name
	}
	sort.Strings(out)
	return out
}

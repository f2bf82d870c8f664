// Package sim runs whole firn nodes — the real holders, generators, ring
// buffers, clock policy and serving states (server.Core) — on the memory
// coordinator, with fake NTP sources and injected clocks, through a fault
// schedule drawn from a seed, and checks firn's promises while it runs:
//
//   - every ID any caller received is unique;
//   - every ID lies at or below its worker's reservation in the
//     coordinator when it is received (a holder never issues past what it
//     reserved);
//   - every ID lies above its holder's floor and at or below what that
//     holder acknowledged, and one worker's holder intervals never
//     overlap, whichever node held them (holders.go);
//   - IDs increase per caller on one node;
//   - a call is answered or refused at once: no call runs to its deadline
//     on a node that is not frozen, and a refusal names its cause;
//   - once every fault has ended, every node serves again within the
//     documented bound;
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
	"github.com/firnid/firn/coordinator/local"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server"
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
}

// Result is what a run found.
type Result struct {
	Seed       int64
	Violations []string // empty: every promise held
	Trace      []string // the schedule's events and the run's notable moments
	IDs        int      // IDs received and checked
	Calls      int
	Refused    int // calls refused at once (not serving, or a wait refused)
}

// Failed reports whether a promise was broken.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Report is the failure's text: the violations, then the trace.
func (r *Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violation(s):\n", r.Seed, len(r.Violations))
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "  … and %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
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
	// node that is not frozen: one reservation write (two coordinator
	// timeouts) plus slack. No call may run to its deadline.
	answerBound = 2*time.Second + 200*time.Millisecond
)

// world is one run.
type world struct {
	o      Options
	rng    *rand.Rand
	store  *memory.Store
	base   clockguard.Clock
	layout generator.Layout
	spec   string
	ntp    bool // nodes run with an NTP source
	// workers is each node's --workers (wide generators).
	workers int
	dir     string
	log     *slog.Logger

	mu           sync.Mutex
	start        time.Time
	nodes        []*node
	issued       map[coordinator.Slot][]idRun     // every ID received, as runs per worker
	restores     int                              // bumps the epoch of the reservation check
	restoredAt   time.Time                        // the last restore: holders run above the store's values until they notice
	bumpedTo     time.Time                        // nodes may wait until about here for a bump's floor
	holders      map[holderKey]*interval          // each node's latest holder interval per worker
	closed       map[coordinator.Slot][]*interval // every closed interval, per worker
	restoreTimes []time.Duration                  // when each restore happened (virtual time since start)
	unconfirmed  time.Duration                    // the largest clock lead a node started with and could not check
	ntpOffset    time.Duration
	ntpSilent    bool
	violations   []string
	trace        []string
	ids, calls   int
	refused      int
}

// Run runs one seed. Call it inside a testing/synctest bubble.
func Run(o Options) (*Result, error) {
	if o.Virtual == 0 {
		o.Virtual = 10 * time.Minute
	}
	w := &world{o: o, rng: rand.New(rand.NewSource(o.Seed)), issued: map[coordinator.Slot][]idRun{}, start: time.Now(),
		holders: map[holderKey]*interval{}, closed: map[coordinator.Slot][]*interval{}}
	w.base = clockguard.NewOffset(clockguard.NewSystem(), era)
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
	w.mu.Lock()
	defer w.mu.Unlock()
	return &Result{Seed: o.Seed, Violations: w.violations, Trace: w.trace, IDs: w.ids, Calls: w.calls, Refused: w.refused}, nil
}

// since is the virtual time since the run began, for the trace.
func (w *world) since() time.Duration { return time.Since(w.start).Round(time.Millisecond) }

func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	w.trace = append(w.trace, fmt.Sprintf("%9v  ", w.since())+fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf("%9v  ", w.since()) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.violations = append(w.violations, msg)
	w.trace = append(w.trace, "VIOLATION "+msg)
	w.mu.Unlock()
}

// --- nodes ------------------------------------------------------------------

type node struct {
	w     *world
	name  string
	dir   string
	clock *clockguard.Offset

	mu      sync.Mutex
	client  *memory.Client
	core    *server.Core
	ntp     *fakeNTP
	up      bool
	frozen  bool
	paused  bool // its callers are idle
	burst   bool // its callers ask for large batches
	life    int  // incremented at every start: callers belong to one life
	stop    chan struct{}
	callers sync.WaitGroup
}

func (w *world) newNode(i int) *node {
	return &node{w: w, name: fmt.Sprintf("n%d", i), dir: fmt.Sprintf("%s/n%d-0", w.dir, i),
		clock: clockguard.NewOffset(w.base, 0)}
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
	cfg := server.DefaultConfig()
	cfg.Cluster = "sim"
	cfg.RingSize = 1024
	// A coarser freshness tick (a quarter of max-staleness) than the
	// default's 25 ms: the ring's filler wakes on it while it holds IDs,
	// and those wake-ups are most of a run's events.
	cfg.MaxStaleness = time.Second
	cfg.Generators = []server.GeneratorConfig{{Name: generatorName, Layout: w.layout}}
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
		// fails closed until the clock reaches its reservation (README,
		// Clock policy): the documented outage, not a broken promise.
		// settle waits it out.
		w.mu.Lock()
		w.unconfirmed = max(w.unconfirmed, off)
		w.mu.Unlock()
		w.note("%s starts with its clock %v ahead and no NTP", n.name, off)
	}
	if err := cfg.Finish(wall); err != nil {
		return err
	}
	st, err := local.Open(n.dir)
	if err != nil {
		return err
	}
	n.client = w.store.Connect(n.clock)
	info := coordinator.NodeInfo{Name: n.name, InstanceID: st.InstanceID(), Address: n.name + ":7300", StartTime: wall}
	log := slog.New(&holderLog{w: w, node: n.name, next: w.log.Handler()}).With("node", n.name)
	opts := []server.CoreOption{server.WithCoreLogger(log)}
	if w.ntp {
		opts = append(opts, server.WithNTPRunner(func(report func(clockguard.NTPResult, error)) (server.NTPRunner, error) {
			n.ntp = &fakeNTP{n: n, report: report, trigger: make(chan struct{}, 1)}
			return n.ntp, nil
		}))
	}
	core, err := server.NewCore(cfg, n.client, st, n.clock, info, opts...)
	if err != nil {
		n.client.Close()
		return err
	}
	if err := core.Start(); err != nil {
		return err
	}
	n.core, n.up, n.frozen = core, true, false
	n.stop = make(chan struct{})
	for c := range 2 {
		n.callers.Add(1)
		go n.caller(fmt.Sprintf("%s/%d/c%d", n.name, n.life, c), core, n.stop, n.life)
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
	core, client, frozen := n.core, n.client, n.frozen
	n.mu.Unlock()
	if frozen {
		client.Thaw()
	}
	n.callers.Wait()
	if graceful {
		core.Stop()
		client.Close()
		return
	}
	client.Kill()
	core.Crash()
	client.Close()
}

// caller asks its node for IDs until stop, checking every answer.
func (n *node) caller(id string, core *server.Core, stop <-chan struct{}, life int) {
	defer n.callers.Done()
	w := n.w
	var last uint64
	rng := rand.New(rand.NewSource(w.o.Seed ^ int64(len(id))*7919 ^ int64(life)))
	buf := make([]uint64, 4096) // reused: received keeps runs, not the slice
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
		count := []int{1, 1, 10, 100, 1000}[rng.Intn(5)]
		if burst {
			count = 4096
		}
		w.mu.Lock()
		epoch := w.restores
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		dst := buf[:count]
		began := time.Now()
		err := core.NextIDs(ctx, generatorName, dst)
		took := time.Since(began)
		cancel()
		n.mu.Lock()
		frozenNow, upNow := n.frozen, n.up
		n.mu.Unlock()
		w.mu.Lock()
		w.calls++
		// A holder's reservation acknowledged before a restore stands
		// above what the restored coordinator shows until the holder's
		// next write (a second) finds it out.
		restored := w.restores != epoch || (!w.restoredAt.IsZero() && time.Since(w.restoredAt) < 5*time.Second)
		w.mu.Unlock()
		if err != nil {
			n.checkRefusal(id, err, took, frozenNow || frozen, upNow)
			continue
		}
		if took > answerBound && !frozenNow {
			w.violate("%s: NextIDs(%d) answered after %v (bound %v)", id, count, took, answerBound)
		}
		for _, x := range dst {
			if x <= last {
				w.violate("%s: ID %d after %d (not increasing per caller)", id, x, last)
			}
			last = x
		}
		w.received(id, dst, restored)
	}
}

// checkRefusal checks a failed call: refused at once with its cause. A
// node that says it serves answers within the bound: a refusal for the
// clock or a reservation means it could not (docs/design.md, Liveness
// rules), as does a call that runs to its deadline.
func (n *node) checkRefusal(id string, err error, took time.Duration, frozen, up bool) {
	w := n.w
	w.mu.Lock()
	w.refused++
	w.mu.Unlock()
	if frozen || !up {
		return // a stopped process's calls say nothing
	}
	var ns *server.NotServingError
	switch {
	case errors.As(err, &ns):
		if strings.TrimSpace(ns.Reason) == "" {
			w.violate("%s: refused without a cause: %v", id, err)
		}
		if !slices.Contains(clockguard.Codes, ns.Code) {
			w.violate("%s: refused with code %q, not one of the API's reasons: %v", id, ns.Code, err)
		}
	case errors.Is(err, generator.ErrRollback), errors.Is(err, generator.ErrForwardStep),
		errors.Is(err, generator.ErrClockRange), errors.Is(err, generator.ErrRetired), errors.Is(err, generator.ErrHeld):
		// The generator names the cause itself, before the state does.
	case errors.Is(err, generator.ErrAhead):
		w.violate("%s: refused for a wait on the clock beyond the call's deadline while serving: %v", id, err)
	case errors.Is(err, generator.ErrReservation), errors.Is(err, context.DeadlineExceeded):
		w.violate("%s: a call ran to its deadline: %v", id, err)
	}
	if took > answerBound {
		w.violate("%s: refused only after %v: %v", id, took, err)
	}
}

// received checks and records one call's IDs: unique, and within the
// reservation the coordinator holds for their worker (unless a restore
// happened during the call). IDs are kept as runs of consecutive values
// (one time unit of one worker each), per worker, so that millions of IDs
// cost thousands of entries.
func (w *world) received(who string, ids []uint64, restored bool) {
	seqMask := w.layout.MaxSequence()
	node, _, _ := strings.Cut(who, "/")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids += len(ids)
	for i := 0; i < len(ids); {
		j := i + 1
		for j < len(ids) && ids[j] == ids[j-1]+1 && ids[j-1]&seqMask != seqMask {
			j++
		}
		first, last := ids[i], ids[j-1]
		i = j
		p, err := w.layout.Decode(last)
		if err != nil {
			w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d does not decode: %v", w.since(), who, last, err))
			continue
		}
		slot := coordinator.Slot{Datacenter: p.Datacenter, Worker: p.Worker}
		if fp, err := w.layout.Decode(first); err == nil {
			w.checkHolderLocked(node, who, slot, fp.Units, first)
		}
		w.checkHolderLocked(node, who, slot, p.Units, last)
		if prev, dup := w.insertRun(slot, idRun{first, last, who}); dup {
			w.violations = append(w.violations, fmt.Sprintf("%9v  IDs %d..%d issued twice: to %s and to %s (%d..%d)",
				w.since(), first, last, prev.who, who, prev.first, prev.last))
			continue
		}
		if restored {
			continue
		}
		if t, r := w.layout.Units(p.Time), w.store.Reserved(generatorName, slot); t > r {
			w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d has time %d above its worker's reservation %d (%s)", w.since(), who, last, t, r, slot))
		}
	}
}

// idRun is a run of consecutive IDs handed to one caller.
type idRun struct {
	first, last uint64
	who         string
}

// insertRun records r among its worker's runs, kept sorted; it reports a
// run r overlaps, if any (then r is not recorded).
func (w *world) insertRun(slot coordinator.Slot, r idRun) (idRun, bool) {
	runs := w.issued[slot]
	i := sort.Search(len(runs), func(i int) bool { return runs[i].first > r.last })
	// runs[:i] start at or below r.last: only runs[i-1] may reach r.
	if i > 0 && runs[i-1].last >= r.first {
		return runs[i-1], true
	}
	runs = append(runs, idRun{})
	copy(runs[i+1:], runs[i:])
	runs[i] = r
	w.issued[slot] = runs
	return idRun{}, false
}

// --- NTP --------------------------------------------------------------------

// fakeNTP is a node's NTP source: its verdict compares the node's clock
// with the true time, shifted by the world's NTP offset, or says the
// servers are unreachable while the world's NTP is silent. It checks once a
// minute, after a second while failing, and at once on Trigger, as the
// real checker does.
type fakeNTP struct {
	n       *node
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
		res, err := f.check()
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

func (f *fakeNTP) check() (clockguard.NTPResult, error) {
	w := f.n.w
	wall, mono := f.n.clock.Now()
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
	w.store.Faults().Clear()
	w.mu.Lock()
	w.ntpOffset, w.ntpSilent = 0, false
	w.mu.Unlock()
	for _, n := range w.nodes {
		n.mu.Lock()
		n.paused, n.burst = false, false
		frozen, client := n.frozen, n.client
		n.frozen = false
		n.mu.Unlock()
		n.clock.SetOffset(0)
		if frozen {
			client.Thaw()
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
		up, core := n.up, n.core
		n.mu.Unlock()
		if !up {
			continue
		}
		for {
			st, _ := core.Status(generatorName)
			if st.Serving {
				break
			}
			if time.Now().After(deadline) {
				w.violate("%s: not serving %v after every fault ended: %s", n.name, bound, st.Reason)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
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

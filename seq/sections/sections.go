// Package sections is one node's serving side of a per-key sequence
// generator: its membership among the generator's nodes, the leases of
// the sections it should own (seq.Assign: balanced rendezvous hashing
// over the live members), each owned section's keys and their current
// values in memory, and the write ahead of each section's persisted
// maximum in the coordinator's counter record (docs/design.md, Per-key sequences). A node serves it
// through server/core/seq.go.
//
// The rules that make a key's values strictly increase across owners:
//   - a value is handed out only when the section's persisted maximum,
//     acknowledged by the coordinator, is at or above it;
//   - a section's new owner writes the record (a fenced compare-and-swap)
//     after it took the section's lease, and starts every key of the
//     section above the maximum that write replaced;
//   - an owner answers only while the coordinator is assured to keep its
//     lease for more than Margin (coordinator.Lease.Assured), checked after
//     every raise the answer relies on: a new owner takes the lease only
//     after the old one ended, so every answer of the old owner came
//     before the new owner's first write, and nothing it handed out is
//     above the maximum that write replaced.
package sections

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
)

// Defaults.
const (
	DefaultPollEvery = 200 * time.Millisecond
	DefaultSettle    = 500 * time.Millisecond
	DefaultMargin    = 500 * time.Millisecond
	DefaultBudget    = 10_000_000
	DefaultMinStep   = 1000
	DefaultInterval  = 2 * time.Second
	// MaxMembers is how many nodes may serve one sequence generator: the
	// member slots follow the sections' in the generator's slot space.
	MaxMembers = 256
	// benchAfter is how many rounds in a row a node's takes may fail (not
	// for the coordinator's unavailability: for its own reasons, say its
	// data dir refusing the takes' marks) while it answers for none of
	// its sections before it leaves the members
	// for benchRounds rounds, so that the live members own its share
	// meanwhile (its keys would otherwise be refused everywhere for as
	// long as its takes fail); then it joins again and tries.
	benchAfter  = 5
	benchRounds = 25
)

// Config is what a Manager needs.
type Config struct {
	Generator string
	Def       seq.Definition
	Coord     coordinator.Coordinator
	// Workers lists the generator's slots (coordinator.Admin.Workers).
	Workers  func(ctx context.Context, generator string) ([]coordinator.SlotState, error)
	Counters coordinator.Counters
	Node     coordinator.NodeInfo
	Clock    clockguard.Clock
	// Timeout bounds each coordinator call.
	Timeout time.Duration
	// PollEvery is how often the node reads the counter and the slots;
	// Settle how long a section's new owner waits, on a shared
	// coordinator, before it confirms its take (0: a private coordinator,
	// no wait).
	PollEvery, Settle time.Duration
	// Margin: a section is answered for only while its lease is assured
	// for longer than this.
	Margin time.Duration
	// Budget is the most keys kept in memory; past it a section forgets
	// keys (a forgotten key starts again above the section's highest
	// value: always safe).
	Budget int
	// MinStep and Interval size the write ahead: a section's maximum is
	// raised to its highest value plus max(MinStep, rate × Interval).
	MinStep  uint64
	Interval time.Duration
	// Known is the last write of the counter this node's data dir
	// remembers (zero: none); Record, when set, stores each write the node
	// makes before any value of it is handed out.
	Known  segment.Mark
	Record func(segment.Mark) error
	// TakeBack lets the node take back its own instance's stale slots (a
	// restart after a crash) without waiting for their leases to end: only
	// on a coordinator no other process of the instance can reach (the
	// node's private embedded one, whose data dir admits one process).
	TakeBack bool
	// Mark writes the generator's restore marker.
	Mark   func(ctx context.Context, ev coordinator.RestoreEvidence) error
	Log    *slog.Logger
	Notify func(err error) // nil: the generator serves; else why not
	// Observe reports each coordinator operation (op: "counter_read",
	// "raise", "acquire").
	Observe func(op string, took time.Duration, err error)
}

// WrongNodeError: another node owns the key's section.
type WrongNodeError struct {
	Generator string
	Section   int
	Owner     coordinator.NodeInfo
}

func (e *WrongNodeError) Error() string {
	return fmt.Sprintf("generator %q: section %d of this key is owned by node %q at %s; call it there (the client routes keys by the section map in Info)",
		e.Generator, e.Section, e.Owner.Name, e.Owner.Address)
}

// MovingError: no node answers for the key's section right now (its
// owner's lease has not ended yet, or its new owner is settling).
type MovingError struct {
	Generator  string
	Section    int
	Why        string
	RetryAfter time.Duration
}

func (e *MovingError) Error() string {
	return fmt.Sprintf("generator %q: section %d has no serving owner: %s; retry in %v", e.Generator, e.Section, e.Why, e.RetryAfter.Round(time.Millisecond))
}

// RaiseError: the section's maximum must rise for this call and the
// write failed.
type RaiseError struct {
	Generator string
	Section   int
	Err       error
}

func (e *RaiseError) Error() string {
	return fmt.Sprintf("generator %q: section %d: its persisted maximum could not be raised: %v", e.Generator, e.Section, e.Err)
}

func (e *RaiseError) Unwrap() error { return e.Err }

// StartingError: the generator does not serve yet, as not every section
// this node should own serves here; it says why (Notify).
type StartingError struct {
	Generator string
	// Held: some are held by another process's lease until it ends (a
	// restart after a crash waits for its own old leases); Free: some are
	// not taken yet; Settling: some were taken and settle before they
	// serve.
	Held, Free, Settling bool
	// Err is why the last round's take failed (nil: it did not).
	Err error
}

func (e *StartingError) Error() string {
	s := fmt.Sprintf("generator %q: not every section this node should own serves here yet", e.Generator)
	if e.Err != nil {
		s += "; taking them failed: " + e.Err.Error()
	}
	if e.Held {
		s += "; some are held by the lease of another process (a previous owner; this node's own before a restart) until it ends"
	}
	if e.Free && e.Err == nil {
		s += "; some are not taken yet (each round acquires for at most the coordinator timeout)"
	}
	if e.Settling {
		s += "; some were taken and settle before they serve"
	}
	return s
}

func (e *StartingError) Unwrap() error { return e.Err }

// ErrRaisePending: a call needed a raise of its section's maximum and the
// coordinator had not acknowledged it shortly before the call's deadline.
var ErrRaisePending = errors.New("the raise this call needs was not acknowledged")

// deadlineMargin is how long before its caller's deadline a call that
// waits for a raise gives up (ErrRaisePending).
const deadlineMargin = 20 * time.Millisecond

// Owner is one section's owner as the node last read it.
type Owner struct {
	Section int
	Node    coordinator.NodeInfo
	// Serving: this node owns it and answers for it; Settling: this node
	// took it and waits for the take to settle.
	Mine, Serving, Settling bool
}

// Stats is what the manager has done.
type Stats struct {
	Members  int    // live members as last read
	Owned    int    // sections this node holds a lease of
	Serving  int    // of them, answered for
	Keys     int64  // keys in memory
	Evicted  uint64 // keys forgotten past the budget
	Raises   uint64 // writes of the counter record (raises and takes)
	Takes    uint64 // sections taken
	Releases uint64 // sections given up (moves, drains, lost leases)
	Issued   uint64 // values handed out
}

// section is one owned section.
type section struct {
	idx   int
	lease coordinator.Lease

	mu       sync.Mutex
	keys     map[uint64]uint64 // key's hash (Manager.seed) → highest value handed out
	floor    uint64            // a key not in keys has had no value above it
	acked    uint64            // the persisted maximum, acknowledged
	top      uint64            // the highest value handed out
	low      uint64            // a raise starts once top reaches it (acked less half a step)
	lastStep uint64            // the step of the last raise
	want     uint64            // a waiting call needs acked >= want
	raised   chan struct{}     // closed at each raise's outcome
	lastErr  error             // the last raise's failure (nil once one lands)
	dropped  bool              // no longer answered for

	// rate: top at the last step computation, and when.
	rateTop uint64
	rateAt  time.Duration

	serving              atomic.Bool
	settleAt             time.Duration // mono
	takeSeq              uint64
	takeID               uint64
	releasing, confirmed bool
}

// Manager serves one sequence generator's sections on one node.
type Manager struct {
	cfg   Config
	cspec coordinator.CounterSpec
	log   *slog.Logger

	sec []atomic.Pointer[section]
	// seed keys the hash of the keys in memory: random per process, so
	// that no caller can make two keys share a value in memory (they would
	// still increase, but one key's calls would move the other's).
	seed maphash.Seed

	mu       sync.Mutex // guards what follows
	member   coordinator.Lease
	beatAt   time.Duration
	members  []string
	assigned []string                        // seq.Assign of members, kept while they stay the same
	nodes    map[string]coordinator.NodeInfo // instance → node
	owners   []coordinator.NodeInfo          // section → live owner (zero: none)
	mark     segment.Mark
	stopped  bool
	ready    bool                      // every section this node should own served once
	orphans  map[int]coordinator.Lease // leases whose release failed, by section
	notified string
	takeErr  error // why the last round's take failed (nil: it did not)
	// failRounds counts the rounds in a row whose take failed while the
	// node answered for none of its sections; past benchAfter it leaves
	// the members until benchUntil (mono), still told benchErr.
	failRounds int
	benchUntil time.Duration
	benchErr   error

	// recMu serialises noteWrite (takes and raises run in two goroutines);
	// recorded is the highest mark it handed to Record.
	recMu    sync.Mutex
	recorded segment.Mark

	keys    atomic.Int64
	evicted atomic.Uint64
	raises  atomic.Uint64
	takes   atomic.Uint64
	rels    atomic.Uint64
	issued  atomic.Uint64

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// New starts a manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Def.Sections < 1 || cfg.Def.Sections > segment.MaxSections {
		return nil, fmt.Errorf("sections: generator %q: %d sections, want 1..%d", cfg.Generator, cfg.Def.Sections, segment.MaxSections)
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = DefaultPollEvery
	}
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.MinStep == 0 {
		cfg.MinStep = DefaultMinStep
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Notify == nil {
		cfg.Notify = func(error) {}
	}
	if cfg.Observe == nil {
		cfg.Observe = func(string, time.Duration, error) {}
	}
	m := &Manager{
		cfg:      cfg,
		cspec:    coordinator.CounterSpec{Generator: cfg.Generator, Definition: cfg.Def.Counter()},
		log:      cfg.Log,
		sec:      make([]atomic.Pointer[section], cfg.Def.Sections),
		seed:     maphash.MakeSeed(),
		owners:   make([]coordinator.NodeInfo, cfg.Def.Sections),
		mark:     cfg.Known,
		recorded: cfg.Known,
		notified: "starting",
		orphans:  map[int]coordinator.Lease{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	m.wg.Add(2)
	go m.loop()
	go m.raiseLoop()
	return m, nil
}

func (m *Manager) mono() time.Duration {
	_, mono := m.cfg.Clock.Now()
	return mono
}

// slotSpec is the coordinator spec of the generator's slot space:
// sections first, then MaxMembers member slots; held are left out.
func (m *Manager) slotSpec(held func(coordinator.Slot) bool) coordinator.Spec {
	n := uint64(m.cfg.Def.Sections + MaxMembers)
	sp := coordinator.Spec{
		Generator: m.cfg.Generator, Layout: m.cfg.Def.String(), WorkerLimit: n, DatacenterLimit: 1,
		Datacenter: -1, MaxFloor: math.MaxInt64, LocalFloor: -1, NoTakeBack: !m.cfg.TakeBack,
		Held: map[coordinator.Slot]bool{},
	}
	for w := range n {
		if s := (coordinator.Slot{Worker: w}); held(s) {
			sp.Held[s] = true
		}
	}
	return sp
}

// --- requests ----------------------------------------------------------------

// Next hands out n values of key: the first returned, the others
// following it.
func (m *Manager) Next(ctx context.Context, key []byte, n uint64) (uint64, error) {
	s, h := m.cfg.Def.Section(seq.Hash(key)), maphash.Bytes(m.seed, key)
	st := m.sec[s].Load()
	if st == nil || !st.serving.Load() {
		return 0, m.notServed(s, st)
	}
	var (
		cut      <-chan time.Time // the caller's deadline, less deadlineMargin
		waitFrom time.Duration
	)
	st.mu.Lock()
	for {
		if st.dropped {
			st.mu.Unlock()
			return 0, m.notServed(s, nil)
		}
		cur, ok := st.keys[h]
		if !ok {
			cur = st.floor
		}
		if cur+n <= st.acked {
			if err := m.assured(st); err != nil {
				st.mu.Unlock()
				return 0, err
			}
			if !ok {
				m.admit(st, h)
			}
			st.keys[h] = cur + n
			st.top = max(st.top, cur+n)
			if st.top >= st.low {
				m.kickRaise()
			}
			st.mu.Unlock()
			m.issued.Add(n)
			return cur + 1, nil
		}
		if cur > segment.MaxID-n {
			st.mu.Unlock()
			return 0, &RaiseError{Generator: m.cfg.Generator, Section: s, Err: fmt.Errorf("%w: key at %d cannot take %d more values", segment.ErrExhausted, cur, n)}
		}
		st.want = max(st.want, cur+n)
		ch := st.raised
		st.mu.Unlock()
		m.kickRaise()
		// The wait ends before the caller's deadline (against the
		// context's own monotonic reading, not the node's clock): a raise
		// that takes longer is refused as such, not as a deadline.
		if dl, ok := ctx.Deadline(); ok && cut == nil {
			waitFrom = m.mono()
			cutT := time.NewTimer(max(time.Until(dl)-deadlineMargin, 0))
			defer cutT.Stop()
			cut = cutT.C
		}
		select {
		case <-ch:
		case <-cut:
			st.mu.Lock()
			if cur, ok := st.keys[h]; !st.dropped && (ok && cur+n <= st.acked || !ok && st.floor+n <= st.acked) {
				continue
			}
			st.mu.Unlock()
			return 0, &RaiseError{Generator: m.cfg.Generator, Section: s,
				Err: fmt.Errorf("%w within the %v the call could wait (the coordinator is slow or unreachable)",
					ErrRaisePending, (m.mono() - waitFrom).Round(time.Millisecond))}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		st.mu.Lock()
		if err := st.lastErr; err != nil && st.acked < st.want {
			st.mu.Unlock()
			return 0, &RaiseError{Generator: m.cfg.Generator, Section: s, Err: err}
		}
	}
}

// Current is a value at or above every value handed out for key, without
// handing one out.
func (m *Manager) Current(ctx context.Context, key []byte) (uint64, error) {
	s, h := m.cfg.Def.Section(seq.Hash(key)), maphash.Bytes(m.seed, key)
	st := m.sec[s].Load()
	if st == nil || !st.serving.Load() {
		return 0, m.notServed(s, st)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.dropped {
		return 0, m.notServed(s, nil)
	}
	if err := m.assured(st); err != nil {
		return 0, err
	}
	if v, ok := st.keys[h]; ok {
		return v, nil
	}
	return st.floor, nil
}

// assured refuses when st's lease is not assured beyond the margin.
func (m *Manager) assured(st *section) error {
	if a := st.lease.Assured(); a <= m.cfg.Margin {
		return &MovingError{Generator: m.cfg.Generator, Section: st.idx, RetryAfter: m.cfg.Margin + a,
			Why: fmt.Sprintf("this node's lease of it is assured for only %v (renewals unacknowledged): it answers no more", a.Round(time.Millisecond))}
	}
	return nil
}

// admit counts a new key of st, forgetting another of st past the budget
// (st.mu held): a forgotten key starts again above the section's highest
// value.
func (m *Manager) admit(st *section, h uint64) {
	if m.keys.Add(1) <= int64(m.cfg.Budget) {
		return
	}
	for k := range st.keys {
		if k != h {
			delete(st.keys, k)
			st.floor = max(st.floor, st.top)
			m.keys.Add(-1)
			m.evicted.Add(1)
			return
		}
	}
}

// notServed is the refusal for a section this node does not answer for.
func (m *Manager) notServed(s int, st *section) error {
	if st != nil && !st.dropped && !st.serving.Load() {
		left := max(st.settleAt-m.mono(), 0) + m.cfg.PollEvery
		return &MovingError{Generator: m.cfg.Generator, Section: s, RetryAfter: left, Why: "this node took it and its take settles"}
	}
	m.mu.Lock()
	owner := m.owners[s]
	stopped := m.stopped
	terr, mine := m.takeErr, m.assigned != nil && m.assigned[s] == m.cfg.Node.InstanceID
	m.mu.Unlock()
	if stopped {
		return &MovingError{Generator: m.cfg.Generator, Section: s, RetryAfter: time.Second, Why: "this node stopped serving the generator"}
	}
	if owner.InstanceID != "" && owner.InstanceID != m.cfg.Node.InstanceID {
		if mine {
			// The section moves here: its holder gives it up once it sees
			// this node among the members, and then names this node.
			// Named back to it, a call would go between the two until
			// this node's next read of the owners (a round can take
			// seconds on a loaded machine), and fail at its deadline
			// with nothing but redirects.
			return &MovingError{Generator: m.cfg.Generator, Section: s, RetryAfter: m.cfg.PollEvery * 2,
				Why: fmt.Sprintf("it moves to this node: node %q (%s) holds its lease until it gives it up", owner.Name, owner.Address)}
		}
		return &WrongNodeError{Generator: m.cfg.Generator, Section: s, Owner: owner}
	}
	if terr != nil && mine {
		return &MovingError{Generator: m.cfg.Generator, Section: s, RetryAfter: m.cfg.PollEvery * 2,
			Why: "this node should own it and has not taken it: its last take failed: " + terr.Error()}
	}
	return &MovingError{Generator: m.cfg.Generator, Section: s, RetryAfter: m.cfg.PollEvery * 2,
		Why: "no live owner holds its lease (its last owner's lease has not ended, or its next owner has not taken it yet)"}
}

// --- the write ahead ------------------------------------------------------------

// step is st's write-ahead step (st.mu held).
func (m *Manager) step(st *section) uint64 {
	now := m.mono()
	el := now - st.rateAt
	step := m.cfg.MinStep
	if el > 0 && st.top > st.rateTop {
		r := float64(st.top-st.rateTop) / el.Seconds() * m.cfg.Interval.Seconds()
		if r > float64(step) {
			step = uint64(min(r, float64(segment.MaxID/4)))
		}
	}
	return step
}

func (m *Manager) kickRaise() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// raiseLoop writes the raises the sections need, all in one write.
func (m *Manager) raiseLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		}
		m.raiseOnce()
	}
}

func (m *Manager) raiseOnce() {
	want := map[int]uint64{}
	var sts []*section
	for i := range m.sec {
		st := m.sec[i].Load()
		if st == nil {
			continue
		}
		st.mu.Lock()
		step := m.step(st)
		st.lastStep = step
		// Half a step of headroom left starts a raise (low); a section
		// within a step rides along in the same write, so that sections
		// nearing their maxima together cost one write, not one each.
		if !st.dropped && st.serving.Load() && (st.want > st.acked || st.acked-min(st.top, st.acked) < step) {
			want[i] = min(max(st.want, st.top), segment.MaxID-step) + step
			sts = append(sts, st)
			st.rateTop, st.rateAt = st.top, m.mono()
		}
		st.mu.Unlock()
	}
	if len(want) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*m.cfg.Timeout)
	defer cancel()
	m.mu.Lock()
	known := m.mark
	m.mu.Unlock()
	start := m.mono()
	r, err := coordinator.RaiseSections(ctx, m.cfg.Counters, m.cspec, want, known, false)
	took := m.mono() - start
	m.cfg.Observe("raise", took, err)
	if err == nil && took > m.cfg.Timeout {
		m.log.Warn("sequence sections' maxima raised slowly", "sections", len(want), "took", took.Round(time.Millisecond))
	}
	if err == nil {
		m.raises.Add(1)
		err = m.noteWrite(r.Record.State)
	}
	if err != nil {
		m.log.Warn("sequence sections' maxima not raised", "sections", len(want), "err", err)
		if errors.Is(err, coordinator.ErrRolledBack) || errors.Is(err, coordinator.ErrRestored) {
			m.restored(err)
		}
	}
	for _, st := range sts {
		st.mu.Lock()
		if err == nil {
			st.acked = max(st.acked, r.Record.State.Sec[st.idx])
			st.low = st.acked - min(st.acked, st.lastStep/2)
			st.lastErr = nil
		} else {
			st.lastErr = err
		}
		close(st.raised)
		st.raised = make(chan struct{})
		st.mu.Unlock()
	}
}

// noteWrite remembers the record this node wrote (its mark, in memory and
// in the data dir) before any value of it is handed out.
//
// Takes (the round loop) and raises (raiseLoop) call it from two
// goroutines, and the data dir keeps the last Record call: a take's
// write recorded after a later raise's would leave the data dir behind
// values handed out, and a restart after a crash and a coordinator
// restored between the two writes would then start below them. So the
// calls are serialised (recMu; Record's fsync under it, within its own
// deadline, was already on both paths) and a mark below the last one
// recorded is not recorded: every write of this process first follows
// a mark it knew, so a lower one is an earlier write whose call came
// late (the history of the one recorded holds it) or one made on a
// coordinator restored under the node, which the higher mark recorded
// lets a restart find.
func (m *Manager) noteWrite(c segment.Counter) error {
	mk := c.Mark()
	m.recMu.Lock()
	defer m.recMu.Unlock()
	m.mu.Lock()
	if mk.Seq >= m.mark.Seq {
		m.mark = mk
	}
	m.mu.Unlock()
	if m.cfg.Record == nil || mk.Seq < m.recorded.Seq {
		return nil
	}
	if err := m.cfg.Record(mk); err != nil {
		return err
	}
	m.recorded = mk
	return nil
}

// --- the loop ----------------------------------------------------------------

func (m *Manager) loop() {
	defer m.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.tick()
		t.Reset(m.nextRound())
	}
}

// nextRound is the wait before the next round: PollEvery, or less when a
// take settles sooner, so that its confirming read begins as its settle
// ends.
func (m *Manager) nextRound() time.Duration {
	wait := m.cfg.PollEvery
	now := m.mono()
	for i := range m.sec {
		// A settle already over waits for the next round like the rest
		// (its confirming read may have failed: no busy loop).
		if st := m.sec[i].Load(); st != nil && !st.serving.Load() && st.settleAt > now {
			wait = min(wait, st.settleAt-now)
		}
	}
	return wait
}

func (m *Manager) notify(err error) {
	s := ""
	if err != nil {
		s = err.Error()
	}
	m.mu.Lock()
	same := s == m.notified
	m.notified = s
	m.mu.Unlock()
	if !same {
		m.cfg.Notify(err)
	}
}

// tick is one round: membership, the counter read (a restore noticed,
// settled takes confirmed), the slots read, then the sections to take and
// to give up.
func (m *Manager) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*m.cfg.Timeout)
	defer cancel()
	readAt := m.mono()
	m.mu.Lock()
	known := m.mark
	m.mu.Unlock()
	rec, err := coordinator.ReadFollowing(ctx, m.cfg.Counters, m.cspec, known)
	m.cfg.Observe("counter_read", m.mono()-readAt, err)
	if err != nil {
		if errors.Is(err, coordinator.ErrRolledBack) || errors.Is(err, coordinator.ErrRestored) {
			m.restored(err)
			return
		}
		m.notify(err)
		if errors.Is(err, segment.ErrCounter) || errors.Is(err, coordinator.ErrSchemaTooNew) || errors.Is(err, coordinator.ErrLayoutMismatch) {
			// A record this node cannot read (a newer binary's, say) is
			// not a coordinator that does not answer: it can raise no
			// maximum, so its sections and its place among the members
			// go to the nodes that can; it joins again once it reads it.
			m.dropAll("the counter does not read here: " + err.Error())
			m.leave(ctx)
		}
		return
	}
	m.mu.Lock()
	if mk := rec.State.Mark(); mk.Seq >= m.mark.Seq {
		m.mark = mk
	}
	m.mu.Unlock()
	m.confirm(rec.State, readAt)
	m.mu.Lock()
	benched := m.mono() < m.benchUntil
	benchErr := m.benchErr
	m.mu.Unlock()
	// The counter is read (and so created, with the pin) before the first
	// acquisition, which would create the pin alone.
	if err := m.membership(ctx, benched); err != nil {
		m.notify(err)
		if errors.Is(err, coordinator.ErrRestored) || errors.Is(err, coordinator.ErrLayoutMismatch) {
			m.dropAll("restore or pin: " + err.Error())
		}
		return
	}

	slots, err := m.cfg.Workers(ctx, m.cfg.Generator)
	if err != nil {
		m.notify(fmt.Errorf("generator %q: reading its sections' owners: %w", m.cfg.Generator, err))
		return
	}
	S := m.cfg.Def.Sections
	owners := make([]coordinator.NodeInfo, S)
	nodes := map[string]coordinator.NodeInfo{}
	for _, sl := range slots {
		if !sl.Live {
			continue
		}
		if i := int(sl.Slot.Worker); i < S {
			owners[i] = sl.Heartbeat.Node
		} else {
			nodes[sl.Heartbeat.Node.InstanceID] = sl.Heartbeat.Node
		}
	}
	if !benched {
		nodes[m.cfg.Node.InstanceID] = m.cfg.Node
	}
	members := make([]string, 0, len(nodes))
	for id := range nodes {
		members = append(members, id)
	}
	sort.Strings(members)
	m.mu.Lock()
	if !slices.Equal(members, m.members) || m.assigned == nil {
		m.assigned = seq.Assign(S, members)
	}
	assigned := m.assigned
	m.owners, m.nodes, m.members = owners, nodes, members
	m.mu.Unlock()

	m.releaseOrphans(ctx)
	me := m.cfg.Node.InstanceID
	var toTake []int
	for s := range S {
		st := m.sec[s].Load()
		top := assigned[s]
		switch {
		case st != nil && (ended(st.lease) || st.lease.Assured() == 0):
			// A lease no longer assured is given up for good, even if its
			// renewals resume: ownership may have passed to another node
			// meanwhile.
			m.release(ctx, st, "its lease ended, or went unrenewed for its TTL")
		case st != nil && top != me:
			m.release(ctx, st, fmt.Sprintf("node %q (%s) joined and owns it now", nodes[top].Name, nodes[top].Address))
			// Calls for it are sent there from now on (WRONG_NODE), not
			// told it moves until the next read shows the new owner.
			m.mu.Lock()
			m.owners[s] = nodes[top]
			m.mu.Unlock()
		case st == nil && m.ownProcess(owners[s]):
			// A live record of this very process that it holds no lease of
			// (a take whose reply was lost, or one a restore brought back)
			// stands in every node's way: the acquisition deletes it and
			// takes the section, given up next round if another node
			// should own it.
			toTake = append(toTake, s)
		case st == nil && top == me && (owners[s].InstanceID == "" || owners[s].InstanceID == me && m.cfg.TakeBack):
			// One of another process of this instance waits for its lease
			// to end (but on the private coordinator, TakeBack).
			toTake = append(toTake, s)
		}
	}
	var terr error
	if len(toTake) > 0 {
		terr = m.take(toTake, rec)
	}
	m.mu.Lock()
	m.takeErr = terr
	m.mu.Unlock()
	if errors.Is(terr, coordinator.ErrRolledBack) || errors.Is(terr, coordinator.ErrRestored) {
		return // restored: notified
	}
	if benched {
		// Out of the members while its takes fail: not ready, naming why.
		m.notify(&StartingError{Generator: m.cfg.Generator, Err: benchErr})
		return
	}
	m.mu.Lock()
	// A coordinator that does not answer (or waits, as for an ended
	// lease's owner record to go) passes: not this node's own failure.
	if terr != nil && !errors.Is(terr, coordinator.ErrUnavailable) && m.servesNone(assigned) {
		if m.failRounds++; m.failRounds >= benchAfter {
			m.failRounds = 0
			m.benchUntil, m.benchErr = m.mono()+benchRounds*m.cfg.PollEvery,
				fmt.Errorf("%w (so it left the members for %v, the others serving its share, and joins again then)", terr, benchRounds*m.cfg.PollEvery)
			m.log.Warn("sequence sections' takes keep failing; leaving the members for a while", "err", terr, "for", benchRounds*m.cfg.PollEvery)
		}
	} else {
		m.failRounds = 0
	}
	m.mu.Unlock()
	m.readyCheck(assigned, owners, terr)
}

// readyCheck tells the serving state the generator serves once every
// section this node should own serves here (at its start: a restart
// after a crash waits for its old leases to end), and at every round
// after that; until then, why not (StartingError, with the round's take
// failure, terr, if any).
func (m *Manager) readyCheck(assigned []string, owners []coordinator.NodeInfo, terr error) {
	m.mu.Lock()
	ready := m.ready
	m.mu.Unlock()
	if ready && terr != nil && m.servesNone(assigned) {
		// Ready through moves, not while it answers for none of its
		// sections and its takes fail (all its leases lost at once, say):
		// it serves again as at its start, once they serve here.
		m.mu.Lock()
		m.ready, ready = false, false
		m.mu.Unlock()
	}
	if !ready {
		me := m.cfg.Node.InstanceID
		e := &StartingError{Generator: m.cfg.Generator, Err: terr}
		for s := range m.sec {
			if assigned[s] != me {
				continue
			}
			switch st := m.sec[s].Load(); {
			case st != nil && st.serving.Load():
				continue
			case st != nil:
				e.Settling = true
			case owners[s].InstanceID != "" && !m.ownProcess(owners[s]):
				e.Held = true
			default:
				e.Free = true
			}
		}
		if e.Settling || e.Held || e.Free {
			m.notify(e)
			return
		}
		m.mu.Lock()
		m.ready = true
		m.mu.Unlock()
	}
	m.notify(nil)
}

// servesNone reports whether some section is this node's to own
// (assigned) and none is answered for here.
func (m *Manager) servesNone(assigned []string) bool {
	mine := false
	for s := range m.sec {
		if st := m.sec[s].Load(); st != nil && st.serving.Load() {
			return false
		}
		mine = mine || assigned[s] == m.cfg.Node.InstanceID
	}
	return mine
}

// ownProcess reports whether n, a live owner record's node, is this
// process (its instance and its start).
func (m *Manager) ownProcess(n coordinator.NodeInfo) bool {
	return n.InstanceID == m.cfg.Node.InstanceID && n.StartTime.Equal(m.cfg.Node.StartTime)
}

// leave gives up the member slot, if held.
func (m *Manager) leave(ctx context.Context) {
	m.mu.Lock()
	l := m.member
	m.mu.Unlock()
	if l == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	err := l.Release(rctx, 0)
	cancel()
	if err == nil || ended(l) {
		m.mu.Lock()
		if m.member == l {
			m.member = nil
		}
		m.mu.Unlock()
	}
}

// membership holds a member slot and beats it once a second; benched,
// it gives the slot up.
func (m *Manager) membership(ctx context.Context, benched bool) error {
	if benched {
		m.leave(ctx)
		return nil
	}
	m.mu.Lock()
	l := m.member
	m.mu.Unlock()
	if l != nil && (ended(l) || l.Assured() == 0) {
		if !ended(l) {
			rctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
			_ = l.Release(rctx, 0)
			cancel()
		}
		l = nil
	}
	S := uint64(m.cfg.Def.Sections)
	if l == nil {
		start := m.mono()
		nl, err := m.cfg.Coord.Acquire(ctx, m.slotSpec(func(s coordinator.Slot) bool { return s.Worker < S }), m.cfg.Node)
		m.cfg.Observe("acquire", m.mono()-start, err)
		if err != nil {
			return fmt.Errorf("generator %q: joining its members: %w", m.cfg.Generator, err)
		}
		m.mu.Lock()
		m.member, m.beatAt = nl, m.mono()
		m.mu.Unlock()
		return nil
	}
	if now := m.mono(); now-m.beatAt >= time.Second {
		wall, _ := m.cfg.Clock.Now()
		if err := l.Reserve(ctx, 0, coordinator.Heartbeat{Node: m.cfg.Node, Wall: wall}); err != nil {
			m.log.Warn("sequence membership heartbeat failed", "err", err)
		}
		m.mu.Lock()
		m.beatAt = now
		m.mu.Unlock()
	}
	return nil
}

// take acquires the leases of sections ss, then writes the record once,
// starting every key of each section taken above the maximum that write
// replaced; it returns why it took less than it could (nil: no failure).
//
// Each acquisition scans the generator's slot space, so taking S
// sections costs about S² reads on etcd: a round acquires for at most
// Timeout (each acquisition bounded by Timeout) and keeps what it got,
// and the next rounds take the rest. The write has its own bound, as a
// raise's, whatever the acquisitions took: with a round's one context
// they used it up, the write failed at once and every section acquired
// was given up, round after round (S = 1024 on etcd never served).
func (m *Manager) take(ss []int, rec coordinator.CounterRecord) error {
	budget, stop := context.WithTimeout(context.Background(), m.cfg.Timeout)
	defer stop()
	leases := map[int]coordinator.Lease{}
	target := map[int]uint64{}
	var failed error
	left := 0 // sections not tried: the budget spent, or stopping
acquire:
	for i, s := range ss {
		select {
		case <-budget.Done():
			left = len(ss) - i
			break acquire
		case <-m.stop:
			break acquire // Stop gives up what is written below
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
		start := m.mono()
		l, err := m.cfg.Coord.Acquire(ctx, m.slotSpec(func(sl coordinator.Slot) bool { return sl.Worker != uint64(s) }), m.cfg.Node)
		m.cfg.Observe("acquire", m.mono()-start, err)
		if err == nil && l.Slot().Worker != uint64(s) {
			_ = l.Release(ctx, 0) // never: every other slot was held out
		}
		cancel()
		if err != nil {
			if !errors.Is(err, coordinator.ErrExhausted) {
				// Held by another is a wait, not a failure.
				m.log.Warn("sequence section not taken", "section", s, "err", err)
				failed = fmt.Errorf("acquiring a section's lease: %w", err)
			}
			continue
		}
		if l.Slot().Worker != uint64(s) {
			continue
		}
		leases[s] = l
		target[s] = min(rec.State.Sec[s], segment.MaxID-m.cfg.MinStep) + m.cfg.MinStep
	}
	if len(leases) == 0 {
		return failed
	}
	m.mu.Lock()
	known := m.mark
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*m.cfg.Timeout)
	defer cancel()
	start := m.mono()
	r, err := coordinator.RaiseSections(ctx, m.cfg.Counters, m.cspec, target, known, true)
	m.cfg.Observe("raise", m.mono()-start, err)
	if err == nil {
		err = m.noteWrite(r.Record.State)
	}
	if err != nil {
		m.log.Warn("sequence sections taken, their first write failed: given up", "sections", len(leases), "err", err)
		for s, l := range leases {
			m.releaseLease(context.Background(), s, l)
		}
		if errors.Is(err, coordinator.ErrRolledBack) || errors.Is(err, coordinator.ErrRestored) {
			m.restored(err)
			return err
		}
		return fmt.Errorf("the first write of the sections taken: %w", err)
	}
	m.raises.Add(1)
	mk := r.Record.State.Mark()
	now := m.mono()
	for s, l := range leases {
		m.takes.Add(1)
		base := startAbove(r.Prev.Sec[s])
		st := &section{idx: s, lease: l, keys: map[uint64]uint64{}, floor: base, acked: r.Record.State.Sec[s], top: base,
			raised: make(chan struct{}), rateTop: base, rateAt: now, settleAt: now + m.cfg.Settle, takeSeq: mk.Seq, takeID: mk.ID}
		st.low = st.acked - min(st.acked-base, m.cfg.MinStep/2)
		if m.cfg.Settle <= 0 {
			st.serving.Store(true)
		}
		m.sec[s].Store(st)
		m.log.Info("sequence section taken", "section", s, "above", base, "max", st.acked, "settle", m.cfg.Settle)
	}
	if left > 0 {
		m.log.Info("sequence sections taken in part within the round's acquisition time; the next rounds take the rest", "taken", len(leases), "left", left, "within", m.cfg.Timeout)
	}
	return failed
}

// confirm serves each settling section whose take settled: the read began
// after its settle and still records its write.
func (m *Manager) confirm(c segment.Counter, readAt time.Duration) {
	for i := range m.sec {
		st := m.sec[i].Load()
		if st == nil || st.serving.Load() || readAt < st.settleAt {
			continue
		}
		if !c.Holds(segment.Mark{Seq: st.takeSeq, ID: st.takeID}) {
			m.release(context.Background(), st, "its take did not settle: the counter no longer records the take's write (a bump, or more writes than the history keeps)")
			continue
		}
		st.serving.Store(true)
		m.log.Info("sequence section serving", "section", i)
	}
}

// drop stops answering for st (st.mu taken: the calls under way finish
// first).
func (m *Manager) drop(st *section, why string) bool {
	st.mu.Lock()
	was := st.dropped
	st.dropped = true
	st.serving.Store(false)
	n := len(st.keys)
	st.keys = nil
	close(st.raised) // waiting calls see it dropped
	st.raised = make(chan struct{})
	st.mu.Unlock()
	if was {
		return false
	}
	m.keys.Add(-int64(n))
	m.sec[st.idx].CompareAndSwap(st, nil)
	m.rels.Add(1)
	m.log.Info("sequence section given up", "section", st.idx, "reason", why)
	return true
}

// release stops answering for st, then frees its lease.
func (m *Manager) release(ctx context.Context, st *section, why string) {
	if !m.drop(st, why) {
		return
	}
	m.releaseLease(ctx, st.idx, st.lease)
}

// releaseLease frees a lease of section s; one whose release failed and
// that has not ended is kept and released again each round (a release
// whose reply was lost, the record a restore brought back: while the
// client holds the lease, the record stands in every node's way).
func (m *Manager) releaseLease(ctx context.Context, s int, l coordinator.Lease) {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	err := l.Release(rctx, 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil || ended(l) {
		if m.orphans[s] == l {
			delete(m.orphans, s)
		}
		return
	}
	if m.orphans[s] != l {
		m.log.Warn("sequence section lease not released; trying again each round", "section", s, "err", err)
	}
	m.orphans[s] = l
}

// releaseOrphans releases again the leases whose release failed.
func (m *Manager) releaseOrphans(ctx context.Context) {
	m.mu.Lock()
	var ss []int
	for s := range m.orphans {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	for _, s := range ss {
		m.mu.Lock()
		l := m.orphans[s]
		m.mu.Unlock()
		if l != nil {
			m.releaseLease(ctx, s, l)
		}
	}
}

// dropAll gives every section up (a restore, a pin changed): the node
// serves again, as at its start, once every section it should own serves
// here (readyCheck), not as soon as the cause clears.
func (m *Manager) dropAll(why string) {
	m.mu.Lock()
	m.ready = false
	m.mu.Unlock()
	for i := range m.sec {
		if st := m.sec[i].Load(); st != nil {
			m.release(context.Background(), st, why)
		}
	}
}

// restored handles a restore found: the marker written, every section
// given up.
func (m *Manager) restored(err error) {
	var rb *coordinator.CounterRolledBackError
	if errors.As(err, &rb) && m.cfg.Mark != nil {
		wall, _ := m.cfg.Clock.Now()
		ev := rb.Evidence(m.cfg.Node, wall)
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
		if merr := m.cfg.Mark(ctx, ev); merr != nil {
			m.log.Error("restore marker not written", "err", merr)
		}
		cancel()
		// The refusal is the marker's, as a segment generator's and every
		// other node's (what was found, and the bump that clears it),
		// with this node's finding: whichever path noticed the restore
		// last (a raise, a read), the reason names the bump.
		err = fmt.Errorf("%w; found here: %w", &coordinator.RestoredError{Evidence: ev}, err)
	}
	m.dropAll("restore: " + err.Error())
	m.notify(err)
}

// Owners is the section map as last read, this node's own sections
// marked.
func (m *Manager) Owners() []Owner {
	m.mu.Lock()
	owners := slices.Clone(m.owners)
	m.mu.Unlock()
	out := make([]Owner, len(owners))
	for s := range owners {
		o := Owner{Section: s, Node: owners[s]}
		if st := m.sec[s].Load(); st != nil {
			o.Mine, o.Node = true, m.cfg.Node
			o.Serving = st.serving.Load()
			o.Settling = !o.Serving
		}
		out[s] = o
	}
	return out
}

// Stats is what the manager has done.
func (m *Manager) Stats() Stats {
	st := Stats{Keys: m.keys.Load(), Evicted: m.evicted.Load(), Raises: m.raises.Load(), Takes: m.takes.Load(),
		Releases: m.rels.Load(), Issued: m.issued.Load()}
	m.mu.Lock()
	st.Members = len(m.members)
	m.mu.Unlock()
	for i := range m.sec {
		if s := m.sec[i].Load(); s != nil {
			st.Owned++
			if s.serving.Load() {
				st.Serving++
			}
		}
	}
	return st
}

// Stop stops the manager. Graceful: every section is given up and its
// lease freed, then the membership; otherwise (a crash) leases end with
// their TTL.
func (m *Manager) Stop(ctx context.Context, graceful bool) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait()
	for i := range m.sec {
		st := m.sec[i].Load()
		if st == nil {
			continue
		}
		if graceful {
			m.release(ctx, st, "the node stops")
		} else {
			m.drop(st, "the node stops")
		}
	}
	m.mu.Lock()
	l := m.member
	m.mu.Unlock()
	if graceful && l != nil {
		_ = l.Release(ctx, 0)
	}
}

// ended reports whether l is known lost or released.
func ended(l coordinator.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

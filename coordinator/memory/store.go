package memory

import (
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// Config configures a Store.
type Config struct {
	// TTL is how long a session outlives its client's silence (the etcd
	// lease TTL). Default coordinator.DefaultTiming().LeaseTTL. Unlike
	// etcd's, any positive duration is accepted.
	TTL time.Duration
	// Timeout bounds each call while the store is Hanging (the backends'
	// coordinator.Timing.Timeout). Default coordinator.DefaultTiming().Timeout.
	Timeout time.Duration
	// Incarnation, when set, returns the incarnation ID of each new pin
	// (for runs that must repeat exactly); nil draws a random one, as the
	// real backends do.
	Incarnation func(generator string) string
	// Logger; default discards.
	Logger *slog.Logger
}

// Store is the coordinator's state: one in-process server that any number
// of clients (Connect) share. All its methods are safe for concurrent use.
// Its timers are Go timers, so a Store created inside a testing/synctest
// bubble runs in the bubble's virtual time: create it, and use it, within
// one bubble.
type Store struct {
	cfg    Config
	log    *slog.Logger
	faults Faults

	mu          sync.Mutex
	st          *state
	nextSession int64 // session IDs are never reused, not even by Restore
	clients     map[*Client]struct{}
}

// state is everything a snapshot holds.
type state struct {
	// rev is the last revision handed out: every write takes the next one,
	// and an acquisition's ownership token is the revision of its take.
	// Restore puts it back, so tokens are reused as etcd's revisions are
	// after a restore without --bump-revision.
	rev      int64
	gens     map[string]*genState
	sessions map[int64]time.Time // live session: expiry deadline
	// defs are the generators defined at runtime, by name: the stored
	// record (coordinator.EncodeDefinition), read back through
	// coordinator.DecodeDefinition as the other backends read theirs.
	defs map[string][]byte
}

type genState struct {
	pin      *coordinator.Pin
	cursor   uint64
	floor    int64 // -1: none
	marker   *coordinator.RestoreEvidence
	owners   map[coordinator.Slot]owner
	reserved map[coordinator.Slot]int64
	// counter is a segment generator's stored counter (nil: none) and the
	// revision of its last write.
	counter    []byte
	counterRev int64
}

// owner is one owner record: the holder, bound to a session, created at
// revision token (the acquisition's ownership token).
type owner struct {
	rec     coordinator.OwnerRecord
	token   int64
	session int64
}

// New returns an empty store.
func New(cfg Config) *Store {
	d := coordinator.DefaultTiming()
	if cfg.TTL <= 0 {
		cfg.TTL = d.LeaseTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Store{cfg: cfg, log: log.With("coordinator", "memory"), st: newState(), clients: map[*Client]struct{}{}}
}

func newState() *state {
	return &state{gens: map[string]*genState{}, sessions: map[int64]time.Time{}, defs: map[string][]byte{}}
}

// TTL is the sessions' TTL.
func (s *Store) TTL() time.Duration { return s.cfg.TTL }

// Faults are the faults every client's operations suffer.
func (s *Store) Faults() *Faults { return &s.faults }

// Connect returns a new client of the store with a session of its own
// (granted on first use and again after it is lost). Its heartbeats'
// take-back ages and its Peers receipt times are read from clock.
func (s *Store) Connect(clock clockguard.Clock) *Client {
	c := newClient(s, clock)
	s.mu.Lock()
	s.clients[c] = struct{}{}
	s.mu.Unlock()
	return c
}

// gen returns generator's state, creating it when create is set (nil
// otherwise when absent).
func (st *state) gen(name string, create bool) *genState {
	g := st.gens[name]
	if g == nil && create {
		g = &genState{floor: -1, owners: map[coordinator.Slot]owner{}, reserved: map[coordinator.Slot]int64{}}
		st.gens[name] = g
	}
	return g
}

func (g *genState) reservedOf(slot coordinator.Slot) int64 {
	if r, ok := g.reserved[slot]; ok {
		return r
	}
	return -1
}

// slots are the slots of m in (datacenter, worker) order.
func slots[V any](m map[coordinator.Slot]V) []coordinator.Slot {
	out := make([]coordinator.Slot, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sortSlots(out)
	return out
}

func sortSlots(s []coordinator.Slot) {
	sort.Slice(s, func(i, j int) bool {
		a, b := s[i], s[j]
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// scan is the generator's state as coordinator.Plan reads it.
func (g *genState) scan() coordinator.Scan {
	sc := coordinator.Scan{Pin: g.pin, Marker: g.marker, Cursor: g.cursor, Floor: g.floor,
		Reserved: make(map[coordinator.Slot]int64, len(g.reserved))}
	for _, slot := range slots(g.owners) {
		sc.Owners = append(sc.Owners, coordinator.Owner{Slot: slot, Record: g.owners[slot].rec})
	}
	for slot, r := range g.reserved {
		sc.Reserved[slot] = r
	}
	return sc
}

// reapLocked ends every session whose deadline has passed, deleting the
// owner records bound to it.
func (s *Store) reapLocked(now time.Time) {
	var gone []int64
	for id, dl := range s.st.sessions {
		if !now.Before(dl) {
			gone = append(gone, id)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] })
	for _, id := range gone {
		s.endSessionLocked(id, "TTL ran out")
	}
}

// endSessionLocked deletes session id and every owner record bound to it.
func (s *Store) endSessionLocked(id int64, why string) {
	if _, ok := s.st.sessions[id]; !ok {
		return
	}
	delete(s.st.sessions, id)
	n := 0
	for _, name := range sortedKeys(s.st.gens) {
		g := s.st.gens[name]
		for _, slot := range slots(g.owners) {
			if g.owners[slot].session == id {
				s.deleteOwnerLocked(name, g, slot)
				n++
			}
		}
	}
	s.log.Info("session ended", "session", id, "reason", why, "owners", n)
}

// putOwnerLocked writes an owner record and tells the watching clients.
func (s *Store) putOwnerLocked(generator string, g *genState, slot coordinator.Slot, o owner) {
	g.owners[slot] = o
	rec := o.rec
	s.notifyLocked(generator, slot, &rec)
}

func (s *Store) deleteOwnerLocked(generator string, g *genState, slot coordinator.Slot) {
	delete(g.owners, slot)
	s.notifyLocked(generator, slot, nil)
}

// notifyLocked hands an owner record's change (rec nil: deleted) to every
// client watching heartbeats, in a fixed order.
func (s *Store) notifyLocked(generator string, slot coordinator.Slot, rec *coordinator.OwnerRecord) {
	for _, c := range s.clientsLocked() {
		c.deliver(peerEvent{generator: generator, slot: slot, rec: rec})
	}
}

// clientsLocked are the connected clients in the order they connected.
func (s *Store) clientsLocked() []*Client {
	out := make([]*Client, 0, len(s.clients))
	for c := range s.clients {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (s *Store) forget(c *Client) {
	s.mu.Lock()
	delete(s.clients, c)
	s.mu.Unlock()
}

// newIncarnation is the incarnation ID of a new pin of generator.
func (s *Store) newPin(spec coordinator.Spec) *coordinator.Pin {
	p := coordinator.NewPin(spec)
	if s.cfg.Incarnation != nil {
		p.Incarnation = s.cfg.Incarnation(spec.Generator)
	}
	return &p
}

// --- snapshots and restores ---------------------------------------------

// Snapshot is a copy of a store's whole state at one moment: pins,
// cursors, floors, restore markers, owner records, reservations, the
// generators' definitions, the live sessions and the revision counter.
type Snapshot struct{ st *state }

// Revision is the revision counter the snapshot holds.
func (sn *Snapshot) Revision() int64 { return sn.st.rev }

// Reserved is reserved[slot] of generator in the snapshot (-1: absent).
func (sn *Snapshot) Reserved(generator string, slot coordinator.Slot) int64 {
	if g := sn.st.gens[generator]; g != nil {
		return g.reservedOf(slot)
	}
	return -1
}

func (st *state) clone() *state {
	out := &state{rev: st.rev, gens: make(map[string]*genState, len(st.gens)), sessions: make(map[int64]time.Time, len(st.sessions)),
		defs: make(map[string][]byte, len(st.defs))}
	for id, dl := range st.sessions {
		out.sessions[id] = dl
	}
	for name, rec := range st.defs {
		out.defs[name] = rec // never modified in place: a write replaces the slice
	}
	for name, g := range st.gens {
		c := &genState{cursor: g.cursor, floor: g.floor, counter: g.counter, counterRev: g.counterRev,
			owners: make(map[coordinator.Slot]owner, len(g.owners)), reserved: make(map[coordinator.Slot]int64, len(g.reserved))}
		if g.pin != nil {
			p := *g.pin
			c.pin = &p
		}
		if g.marker != nil {
			m := *g.marker
			c.marker = &m
		}
		for k, v := range g.owners {
			c.owners[k] = v
		}
		for k, v := range g.reserved {
			c.reserved[k] = v
		}
		out.gens[name] = c
	}
	return out
}

// Snapshot returns a copy of the whole state (sessions whose TTL ran out
// are ended first).
func (s *Store) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reapLocked(time.Now())
	return &Snapshot{st: s.st.clone()}
}

// Restore puts the state back to snap, as restoring a coordinator from an
// older snapshot does: reservations, floors, markers, pins, cursors and
// definitions as the snapshot has them; owner records and sessions as in the snapshot
// (a session of the snapshot lives again, its TTL counted from now; one
// granted since is gone, and its client learns so at its next renewal);
// the revision counter back to the snapshot's, so the ownership tokens of
// acquisitions made after the restore repeat those made after the
// snapshot. Clients watching heartbeats read them again.
func (s *Store) Restore(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := snap.st.clone()
	now := time.Now()
	for id := range st.sessions {
		st.sessions[id] = now.Add(s.cfg.TTL)
	}
	s.st = st
	for _, c := range s.clientsLocked() {
		c.restored()
	}
	s.log.Warn("state restored from a snapshot", "revision", st.rev)
}

// --- direct access, behind every holder's back ---------------------------

// SetDefinitionRecord stores rec as generator's definition record as it
// is, unchecked (what a newer binary, or a hand edit, may have written).
func (s *Store) SetDefinitionRecord(generator string, rec []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.rev++
	s.st.defs[generator] = append([]byte(nil), rec...)
}

// Reserved reads reserved[slot] of generator directly (-1: absent).
func (s *Store) Reserved(generator string, slot coordinator.Slot) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.st.gen(generator, false); g != nil {
		return g.reservedOf(slot)
	}
	return -1
}

// SetReserved writes reserved[slot] of generator directly, behind every
// holder's back (an operator's write, or part of a restore).
func (s *Store) SetReserved(generator string, slot coordinator.Slot, r int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.rev++
	s.st.gen(generator, true).reserved[slot] = r
}

// Holders reads generator's slots directly, as Workers lists them (every
// slot with an owner or a reservation, in slot order), with no fault
// applied: for checks from outside the system under test.
func (s *Store) Holders(generator string) []coordinator.SlotState {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reapLocked(time.Now())
	return s.st.holders(generator)
}

func (st *state) holders(generator string) []coordinator.SlotState {
	g := st.gen(generator, false)
	if g == nil {
		return nil
	}
	all := map[coordinator.Slot]bool{}
	for s := range g.owners {
		all[s] = true
	}
	for s := range g.reserved {
		all[s] = true
	}
	var out []coordinator.SlotState
	for _, slot := range slots(all) {
		h := coordinator.SlotState{Slot: slot, Reserved: g.reservedOf(slot)}
		if o, ok := g.owners[slot]; ok {
			h.Live, h.Heartbeat = true, o.rec.Heartbeat()
		}
		out = append(out, h)
	}
	return out
}

// Revision is the revision counter: the number of writes so far (less
// those a Restore undid).
func (s *Store) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.rev
}

// Sessions is the number of live sessions (sessions whose TTL ran out are
// ended first).
func (s *Store) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reapLocked(time.Now())
	return len(s.st.sessions)
}

// ExpireLease ends one lease's ownership now, as if it alone had timed
// out: its owner record is deleted (when it still holds it) and its Done
// closes. Its session, and the client's other leases, live on. It reports
// whether the record was the lease's. l must come from a client of this
// store.
func (s *Store) ExpireLease(l coordinator.Lease) bool {
	ml, ok := l.(*lease)
	if !ok || ml.c.s != s {
		return false
	}
	s.mu.Lock()
	held := false
	if g := s.st.gen(ml.Spec().Generator, false); g != nil {
		if o, ok := g.owners[ml.Slot()]; ok && o.token == ml.token && o.session == ml.guardSession {
			s.st.rev++
			s.deleteOwnerLocked(ml.Spec().Generator, g, ml.Slot())
			held = true
		}
	}
	s.mu.Unlock()
	ml.Finish("lease expired")
	return held
}

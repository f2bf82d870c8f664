package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// ErrCorrupt: a state file cannot be read. The node must not guess.
var ErrCorrupt = errors.New("local: coordinator state file unreadable")

// State is the coordinator state of one data directory. It is safe for
// concurrent use.
type State struct {
	dir      string
	instance string
	mu       sync.Mutex
	gens     map[string]*Gen
}

// Open opens (creating if needed) the state under dataDir/coordinator and
// creates the instance ID at first use.
func Open(dataDir string) (*State, error) {
	if dataDir == "" {
		return nil, fmt.Errorf("%w: data dir is empty", coordinator.ErrInvalidSpec)
	}
	dir := filepath.Join(dataDir, "coordinator")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	s := &State{dir: dir, gens: map[string]*Gen{}}
	path := filepath.Join(dir, "instance")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		s.instance = strings.TrimSpace(string(b))
		if len(s.instance) != 32 {
			return nil, fmt.Errorf("%w: %s holds %q", ErrCorrupt, path, b)
		}
	case errors.Is(err, os.ErrNotExist):
		var r [16]byte
		_, _ = rand.Read(r[:])
		s.instance = hex.EncodeToString(r[:])
		if err := WriteFileAtomic(path, []byte(s.instance+"\n")); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("local: %w", err)
	}
	return s, nil
}

// InstanceID identifies this data directory (NodeInfo.InstanceID).
func (s *State) InstanceID() string { return s.instance }

// Dir is the state directory.
func (s *State) Dir() string { return s.dir }

// genFile is one generator's persisted state.
type genFile struct {
	// Incarnation is the pin's incarnation ID last seen ("" before the
	// first acquisition).
	Incarnation string `json:"incarnation"`
	// LastReservation is the node's own last reservation (-1: none).
	LastReservation int64 `json:"last_reservation"`
	// Acked maps "<dc>-<worker>" to the last R acknowledged for that slot.
	Acked map[string]int64 `json:"acked"`
	// Counter is a segment generator's last write of its counter this
	// node made (nil: none, or a snowflake generator); Held the IDs the
	// node held unused then (0 after a graceful stop handed them back).
	Counter *segment.Mark `json:"counter,omitempty"`
	Held    uint64        `json:"held,omitempty"`
}

// Gen is one generator's state.
type Gen struct {
	s      *State
	name   string
	legacy string // gen-<name>.json: written by earlier versions, read once
	slots  slots
	// io orders the writes (and guards slots); mu guards the state and
	// is never held across a write, so that Acked and the readers never
	// wait on the disk. A write takes io, then mu.
	io sync.Mutex
	mu sync.Mutex
	f  genFile
	// sent is, per slot still held, the largest reservation BeforeReserve
	// wrote (durably, in LastReservation) for a Reserve sent since: an
	// answer may still come, and the holder issues up to it once it does.
	sent map[string]int64
}

// Generator returns the state of one generator, loading it from disk.
func (s *State) Generator(name string) (*Gen, error) {
	if name == "" || strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("%w: generator name %q", coordinator.ErrInvalidSpec, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gens[name]; g != nil {
		return g, nil
	}
	g := &Gen{s: s, name: name, legacy: filepath.Join(s.dir, "gen-"+name+".json"),
		slots: slots{base: filepath.Join(s.dir, "gen-"+name)},
		f:     genFile{LastReservation: -1, Acked: map[string]int64{}}, sent: map[string]int64{}}
	b, err := g.slots.load()
	if err != nil {
		return nil, err
	}
	from := g.slots.base + ".{0,1}"
	if b == nil {
		// No slot yet: the single JSON file of earlier versions, if any.
		b, err = os.ReadFile(g.legacy)
		switch {
		case err == nil:
			from = g.legacy
		case errors.Is(err, os.ErrNotExist):
			b = nil
		default:
			return nil, fmt.Errorf("local: %w", err)
		}
	}
	if b != nil {
		if err := json.Unmarshal(b, &g.f); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, from, err)
		}
		if g.f.Acked == nil {
			g.f.Acked = map[string]int64{}
		}
	}
	s.gens[name] = g
	return g, nil
}

func slotKey(s coordinator.Slot) string { return fmt.Sprintf("%d-%d", s.Datacenter, s.Worker) }

// LocalFloor is the node's own last reservation (-1 if none), for
// Spec.LocalFloor.
func (g *Gen) LocalFloor() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.f.LastReservation
}

// Incarnation is the pin incarnation remembered ("" if none yet).
func (g *Gen) Incarnation() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.f.Incarnation
}

// AckedFor is the last R acknowledged for slot (-1 if none).
func (g *Gen) AckedFor(slot coordinator.Slot) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.f.Acked[slotKey(slot)]; ok {
		return v
	}
	return -1
}

// Check is called right after an acquisition, before the lease is used.
// It refuses (and the node must not serve) when the pin's incarnation
// changed (an error matching coordinator.ErrRecreated) or when the
// reservation read at acquisition is below the last one acknowledged for
// that slot (a *coordinator.RolledBackError). On success it remembers the
// incarnation.
func (g *Gen) Check(l coordinator.Lease) error {
	return g.commit(func() (func(), error) { return g.check(l) })
}

func (g *Gen) check(l coordinator.Lease) (undo func(), err error) {
	if g.f.Incarnation != "" && g.f.Incarnation != l.Incarnation() {
		// Everything this node reserved or saw acknowledged under the
		// incarnation it knew is unknown to the new pin. Refused until a
		// bump's generator floor lies above it (the operator's answer to
		// lost coordinator data: coordinator bump); then the new
		// incarnation is taken, below.
		top := g.f.LastReservation
		for _, v := range g.f.Acked {
			top = max(top, v)
		}
		if top >= 0 && behind(l.GeneratorFloor(), top) {
			return nil, &coordinator.RecreatedError{Generator: g.name, Known: g.f.Incarnation, Pin: l.Incarnation(), Top: top}
		}
	}
	// What the coordinator vouches for the slot is its reservation or,
	// when a bump set one above it, the generator floor: after a bump that
	// covers what this node acknowledged, a worker the restored state does
	// not show is no new evidence of a restore.
	if acked, ok := g.f.Acked[slotKey(l.Slot())]; ok && behind(max(l.ReadReserved(), l.GeneratorFloor()), acked) {
		return nil, &coordinator.RolledBackError{Generator: g.name, Slot: l.Slot(), Seen: l.ReadReserved(), Acked: acked}
	}
	if g.f.Incarnation == l.Incarnation() {
		return nil, nil
	}
	// Remembered only once on disk: a failed save must not let the next
	// Check pass without writing it.
	prev := g.f.Incarnation
	g.f.Incarnation = l.Incarnation()
	return func() { g.f.Incarnation = prev }, nil
}

// BeforeReserve durably raises the node's last reservation to until; call
// it before the Reserve is sent.
func (g *Gen) BeforeReserve(slot coordinator.Slot, until int64) error {
	return g.commit(func() (func(), error) {
		if k := slotKey(slot); until > g.sent[k] {
			g.sent[k] = until
		}
		if until <= g.f.LastReservation {
			return nil, nil
		}
		// Kept only once on disk: after a failed save the next
		// BeforeReserve at or below until must write, not find it
		// recorded. (Readers may see it raised meanwhile: a floor too
		// high, never too low.)
		prev := g.f.LastReservation
		g.f.LastReservation = until
		return func() { g.f.LastReservation = prev }, nil
	})
}

// Acked remembers R as acknowledged for slot; it is persisted with the
// next write.
func (g *Gen) Acked(slot coordinator.Slot, r int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := slotKey(slot)
	if v, ok := g.f.Acked[k]; !ok || r > v {
		g.f.Acked[k] = r
	}
}

// BeforeRelease durably lowers slot's acknowledged R to highest (the
// highest time the stopped generator produced; the release writes
// max(highest, Floor)), and the node's last reservation to the largest R
// any slot still shows or was sent for; call it before the Release is
// sent. Lowering first is safe: no time above highest was used. A node
// holding several workers of the generator (a wide generator) keeps its
// last reservation at the others' while they are held — their
// acknowledged reservations and those sent and not yet answered, which
// they issue up to once answered — so that its next lease, even after a
// restart, starts above every ID it issued.
func (g *Gen) BeforeRelease(slot coordinator.Slot, value int64) error {
	return g.commit(func() (func(), error) {
		k := slotKey(slot)
		g.f.Acked[k] = value
		delete(g.sent, k)
		g.f.LastReservation = value
		for _, v := range g.f.Acked {
			g.f.LastReservation = max(g.f.LastReservation, v)
		}
		for _, v := range g.sent {
			g.f.LastReservation = max(g.f.LastReservation, v)
		}
		return keep, nil
	})
}

// CounterMark is the last write of a segment generator's counter this
// data dir recorded (the zero Mark: none), and the IDs the node held
// unused then: after a crash, at most what the crash lost.
func (g *Gen) CounterMark() (segment.Mark, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f.Counter == nil {
		return segment.Mark{}, 0
	}
	return *g.f.Counter, g.f.Held
}

// RecordCounter durably records m, a write of the segment generator's
// counter this node made, before any ID it claimed is handed out: after a
// restart the node checks the counter's history for it
// (segment.Counter.Follows), so a coordinator restored meanwhile is found
// by the node's first read. A mark below the one recorded (a restore the
// node has not found) is recorded all the same: the later write is the
// one the counter must hold. held is what the node then holds unused (0
// once a graceful stop handed it back).
func (g *Gen) RecordCounter(m segment.Mark, held uint64) error {
	return g.commit(func() (func(), error) {
		g.f.Counter, g.f.Held = &m, held
		return keep, nil
	})
}

// Flush persists what Acked recorded.
func (g *Gen) Flush() error {
	return g.commit(func() (func(), error) { return keep, nil })
}

// keep is the undo of a change that stays in memory when its save fails
// (the next save writes it whatever it finds).
func keep() {}

// commit runs change on the state under mu. When change returns an undo,
// the state as change left it is written, holding io but not mu while the
// disk works: Acked and the readers never wait on a write, and the writes
// land in the order their states were taken. A failed write runs undo.
func (g *Gen) commit(change func() (undo func(), err error)) error {
	g.io.Lock()
	defer g.io.Unlock()
	g.mu.Lock()
	undo, err := change()
	if err != nil || undo == nil {
		g.mu.Unlock()
		return err
	}
	b, err := json.Marshal(g.f)
	g.mu.Unlock()
	if err == nil {
		err = g.save(b)
	}
	if err != nil {
		g.mu.Lock()
		undo()
		g.mu.Unlock()
	}
	return err
}

// save writes b, the state; call with io held.
func (g *Gen) save(b []byte) error {
	created, err := g.slots.save(b)
	if err != nil {
		return err
	}
	if !created {
		return nil
	}
	// A slot file was created: make its name durable, and retire the
	// earlier versions' file, which the slots now supersede.
	if err := os.Remove(g.legacy); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local: %w", err)
	}
	return syncDir(g.s.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("local: fsync dir %s: %w", dir, err)
	}
	return nil
}

// WriteFileAtomic replaces path with data: a temporary file in the same
// directory is written and fsynced, renamed over path, and the directory
// is fsynced.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("local: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("local: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	ok = true
	return syncDir(dir)
}

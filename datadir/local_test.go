package datadir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// fakeLease carries only what Check reads (pure logic: no coordinator).
type fakeLease struct {
	coordinator.Lease
	slot        coordinator.Slot
	read        int64
	genFloor    int64
	incarnation string
}

func (f fakeLease) Slot() coordinator.Slot { return f.slot }
func (f fakeLease) ReadReserved() int64    { return f.read }
func (f fakeLease) GeneratorFloor() int64  { return f.genFloor }
func (f fakeLease) Incarnation() string    { return f.incarnation }

func TestInstanceIDStable(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.InstanceID() == "" || a.InstanceID() != b.InstanceID() {
		t.Fatalf("instance IDs %q and %q", a.InstanceID(), b.InstanceID())
	}
	c, _ := Open(t.TempDir())
	if c.InstanceID() == a.InstanceID() {
		t.Fatal("two data dirs share an instance ID")
	}
}

func TestReservationSurvivesAndLowers(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	g, err := s.Generator("default")
	if err != nil {
		t.Fatal(err)
	}
	if g.LocalFloor() != -1 {
		t.Fatalf("fresh LocalFloor %d, want -1", g.LocalFloor())
	}
	slot := coordinator.Slot{Worker: 7}
	for _, v := range []int64{100, 250, 200} {
		if err := g.BeforeReserve(slot, v); err != nil {
			t.Fatal(err)
		}
	}
	g.Acked(slot, 250)
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	s2, _ := Open(dir)
	g2, _ := s2.Generator("default")
	if g2.LocalFloor() != 250 || g2.AckedFor(slot) != 250 {
		t.Fatalf("after reopen LocalFloor %d acked %d, want 250 and 250", g2.LocalFloor(), g2.AckedFor(slot))
	}
	if err := g2.BeforeRelease(slot, 180); err != nil {
		t.Fatal(err)
	}
	s3, _ := Open(dir)
	g3, _ := s3.Generator("default")
	if g3.LocalFloor() != 180 || g3.AckedFor(slot) != 180 {
		t.Fatalf("after release LocalFloor %d acked %d, want 180 and 180", g3.LocalFloor(), g3.AckedFor(slot))
	}
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestCheck(t *testing.T) {
	s, _ := Open(t.TempDir())
	g, _ := s.Generator("g")
	slot := coordinator.Slot{Datacenter: 1, Worker: 2}
	if err := g.Check(fakeLease{slot: slot, read: -1, incarnation: "inc-1"}); err != nil {
		t.Fatalf("first check: %v", err)
	}
	g.Acked(slot, 5000)
	for _, tc := range []struct {
		name string
		l    fakeLease
		want error
	}{
		{"same incarnation, R at acked", fakeLease{slot: slot, read: 5000, incarnation: "inc-1"}, nil},
		{"R above acked", fakeLease{slot: slot, read: 9000, incarnation: "inc-1"}, nil},
		{"other slot never held", fakeLease{slot: coordinator.Slot{Worker: 3}, read: -1, incarnation: "inc-1"}, nil},
		{"R below acked", fakeLease{slot: slot, read: 4999, incarnation: "inc-1"}, coordinator.ErrRolledBack},
		{"R absent after a restore", fakeLease{slot: slot, read: -1, genFloor: -1, incarnation: "inc-1"}, coordinator.ErrRolledBack},
		// A bump's generator floor above what this node acknowledged:
		// the restore was handled, the slot absent from the restored state
		// is no new evidence.
		{"R absent under a bump's floor above acked", fakeLease{slot: slot, read: -1, genFloor: 5001, incarnation: "inc-1"}, nil},
		{"R below acked, floor below too", fakeLease{slot: slot, read: 10, genFloor: 4000, incarnation: "inc-1"}, coordinator.ErrRolledBack},
		{"pin recreated", fakeLease{slot: slot, read: 9000, incarnation: "inc-2"}, coordinator.ErrRecreated},
	} {
		err := g.Check(tc.l)
		if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.want != nil && !strings.Contains(err.Error(), tc.want.Error()) {
			t.Errorf("%s: message %q lacks the reason %q", tc.name, err, tc.want)
		}
	}
}

func TestCorruptRefused(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	if err := os.WriteFile(filepath.Join(s.Dir(), "gen-x.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Generator("x"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt file: %v, want ErrCorrupt", err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), "instance"), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt instance: %v, want ErrCorrupt", err)
	}
	if _, err := s.Generator("../x"); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("bad name: %v, want ErrInvalidSpec", err)
	}
}

// The generator state goes alternately into two slot files; a reload
// takes the newest whole record, so a save torn by a crash falls back to
// the one before it, and a slot that is torn with no whole one beside it
// is refused.
func TestSlotsTornWriteFallsBack(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("g")
	if err != nil {
		t.Fatal(err)
	}
	slot := coordinator.Slot{Worker: 1}
	for _, v := range []int64{100, 200, 300} {
		if err := g.BeforeReserve(slot, v); err != nil {
			t.Fatal(err)
		}
	}
	reload := func() (*Gen, error) {
		t.Helper()
		s2, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s2.Generator("g")
	}
	if g2, err := reload(); err != nil || g2.LocalFloor() != 300 {
		t.Fatalf("reload: floor %v, %v; want 300", g2, err)
	}
	// Three saves: sequence 3 is in slot 1, sequence 2 (200) in slot 0.
	newest := filepath.Join(s.Dir(), "gen-g.1")
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newest, b[:len(b)-3], 0o600); err != nil { // torn: a short payload
		t.Fatal(err)
	}
	g2, err := reload()
	if err != nil || g2.LocalFloor() != 200 {
		t.Fatalf("after a torn newest slot: floor %d, %v; want the previous save, 200", g2.LocalFloor(), err)
	}
	// The next save overwrites the torn slot, never the whole one.
	if err := g2.BeforeReserve(slot, 400); err != nil {
		t.Fatal(err)
	}
	if g3, err := reload(); err != nil || g3.LocalFloor() != 400 {
		t.Fatalf("after saving over the torn slot: %v; want 400", err)
	}
	// A flipped byte is caught by the checksum as well.
	b, _ = os.ReadFile(newest)
	b[len(b)-2] ^= 0x01
	os.WriteFile(newest, b, 0o600)
	if g4, err := reload(); err != nil || g4.LocalFloor() != 200 {
		t.Fatalf("after a corrupt newest slot: %v; want 200", err)
	}
	// Both slots unreadable: refused, never guessed.
	os.WriteFile(filepath.Join(s.Dir(), "gen-g.0"), []byte("firn-state 1 9 5 00000000\nabc"), 0o600)
	if _, err := reload(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("both slots torn: %v, want ErrCorrupt", err)
	}
}

// State written by earlier versions (one gen-<name>.json) is read, and the
// first save moves it into the slots and removes the old file.
func TestLegacyStateMigrates(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(s.Dir(), "gen-m.json")
	if err := os.WriteFile(legacy, []byte(`{"incarnation":"inc","last_reservation":777,"acked":{"0-2":700}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("m")
	if err != nil {
		t.Fatal(err)
	}
	if g.LocalFloor() != 777 || g.Incarnation() != "inc" || g.AckedFor(coordinator.Slot{Worker: 2}) != 700 {
		t.Fatalf("legacy state: floor %d, incarnation %q, acked %d", g.LocalFloor(), g.Incarnation(), g.AckedFor(coordinator.Slot{Worker: 2}))
	}
	if err := g.BeforeReserve(coordinator.Slot{Worker: 2}, 800); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("legacy file still there after the first save: %v", err)
	}
	s2, _ := Open(dir)
	g2, err := s2.Generator("m")
	if err != nil || g2.LocalFloor() != 800 || g2.AckedFor(coordinator.Slot{Worker: 2}) != 700 {
		t.Fatalf("after migration: floor %d acked %d, %v", g2.LocalFloor(), g2.AckedFor(coordinator.Slot{Worker: 2}), err)
	}
}

// A node holding two workers of one generator: releasing one lowers the
// last reservation only to what the other still shows, and the last
// release to the highest either produced.
func TestReleaseKeepsTheOtherWorkersReservation(t *testing.T) {
	s, _ := Open(t.TempDir())
	g, err := s.Generator("default")
	if err != nil {
		t.Fatal(err)
	}
	a, b := coordinator.Slot{Worker: 1}, coordinator.Slot{Worker: 2}
	if err := g.BeforeReserve(a, 300); err != nil {
		t.Fatal(err)
	}
	g.Acked(a, 300)
	if err := g.BeforeReserve(b, 310); err != nil {
		t.Fatal(err)
	}
	g.Acked(b, 310)
	if err := g.BeforeRelease(a, 205); err != nil {
		t.Fatal(err)
	}
	if g.LocalFloor() != 310 {
		t.Fatalf("after one of two releases LocalFloor %d, want the other's 310", g.LocalFloor())
	}
	if err := g.BeforeRelease(b, 204); err != nil {
		t.Fatal(err)
	}
	if g.LocalFloor() != 205 {
		t.Fatalf("after both releases LocalFloor %d, want the highest produced, 205", g.LocalFloor())
	}
}

// A node holding two workers: one is released while the other's Reserve
// is sent (its reservation durably raised first) and not yet answered.
// The release keeps the last reservation at the one sent: once answered,
// the other issues up to it, and after a crash the data dir must still
// start the node's next lease above it.
func TestReleaseKeepsAReservationInFlight(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	g, err := s.Generator("wide")
	if err != nil {
		t.Fatal(err)
	}
	a, b := coordinator.Slot{Worker: 1}, coordinator.Slot{Worker: 2}
	for _, step := range []struct {
		slot coordinator.Slot
		r    int64
	}{{a, 100}, {b, 90}} {
		if err := g.BeforeReserve(step.slot, step.r); err != nil {
			t.Fatal(err)
		}
		g.Acked(step.slot, step.r)
	}
	if err := g.BeforeReserve(b, 120); err != nil { // b's Reserve(120) is sent
		t.Fatal(err)
	}
	if err := g.BeforeRelease(a, 100); err != nil { // a stops meanwhile
		t.Fatal(err)
	}
	g.Acked(b, 120) // answered: b issues up to 120; then the node crashes
	s, _ = Open(dir)
	if g, err = s.Generator("wide"); err != nil {
		t.Fatal(err)
	}
	if g.LocalFloor() < 120 {
		t.Fatalf("LocalFloor %d after the crash, below the reservation 120 sent before the release", g.LocalFloor())
	}
}

// FuzzDecodeSlot: a data-dir record is read only when it is whole — its
// header, length and checksum agree — so a torn or foreign file is never
// taken for a reservation: what decodes encodes back to the same bytes.
func FuzzDecodeSlot(f *testing.F) {
	f.Add(encodeSlot(7, []byte(`{"reserved":42}`)))
	f.Add([]byte("firn-state 1 7 3 00000000\nabc"))
	f.Add([]byte("no header"))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, payload, err := decodeSlot(b)
		if err == nil && !bytes.Equal(encodeSlot(seq, payload), b) {
			t.Fatalf("decodeSlot(%q) = %d, %q, which is stored as %q", b, seq, payload, encodeSlot(seq, payload))
		}
	})
}

// TestCounterMarkSurvives: a segment generator's last write of its counter
// and what the node held then survive a reopen, exactly (IDs near 2^64).
func TestCounterMarkSurvives(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("orders")
	if err != nil {
		t.Fatal(err)
	}
	if m, held := g.CounterMark(); m != (segment.Mark{}) || held != 0 {
		t.Fatalf("a new data dir remembers %+v, held %d", m, held)
	}
	want := segment.Mark{Seq: 1<<63 + 5, ID: 1<<64 - 1, Next: 1<<63 - 1}
	if err := g.RecordCounter(want, 1<<40+3); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s2.Generator("orders")
	if err != nil {
		t.Fatal(err)
	}
	if m, held := g2.CounterMark(); m != want || held != 1<<40+3 {
		t.Fatalf("after a reopen: %+v held %d, want %+v held %d", m, held, want, uint64(1<<40+3))
	}
}

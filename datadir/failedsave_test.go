package datadir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/firnid/firn/coordinator"
)

// A save that fails (a write error: ENOSPC, EIO) must leave the in-memory
// record where the disk has it: otherwise the next BeforeReserve at or
// below the failed value finds nothing to write, returns nil, and its
// Reserve is sent with the disk still holding less. Here a wide
// generator's worker A fails to journal 300; worker B then journals 250,
// the disk having recovered: B's Reserve(250) is sent only if 250 is on
// disk.
func TestFailedSaveDoesNotSkipTheNextWrite(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("wide")
	if err != nil {
		t.Fatal(err)
	}
	a, b := coordinator.Slot{Worker: 1}, coordinator.Slot{Worker: 2}
	if err := g.BeforeReserve(a, 100); err != nil { // sequence 1, slot file .1
		t.Fatal(err)
	}
	// The next save goes to slot file .0: make it fail (a directory in
	// its place cannot be opened for writing, even by root).
	obstacle := filepath.Join(s.Dir(), "gen-wide.0")
	if err := os.Mkdir(obstacle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := g.BeforeReserve(a, 300); err == nil {
		t.Fatal("BeforeReserve(300) succeeded with its slot file unwritable")
	}
	// A's Reserve(300) is not sent. The disk recovers.
	if err := os.Remove(obstacle); err != nil {
		t.Fatal(err)
	}
	if err := g.BeforeReserve(b, 250); err != nil {
		t.Fatal(err) // B's Reserve(250) is not sent: safe
	}
	// BeforeReserve returned nil: B's Reserve(250) is sent, acknowledged,
	// and B issues up to 250. The node crashes.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s2.Generator("wide")
	if err != nil {
		t.Fatal(err)
	}
	if got := g2.LocalFloor(); got < 250 {
		t.Fatalf("after a restart LocalFloor is %d, below the reservation 250 that BeforeReserve let be sent", got)
	}
}

// The same for the pin's incarnation: a Check whose save failed must not
// let the next Check pass without writing it.
func TestFailedSaveKeepsIncarnationUnsaved(t *testing.T) {
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
	obstacle := filepath.Join(s.Dir(), "gen-g.1") // the first save's slot file
	if err := os.Mkdir(obstacle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(fakeLease{slot: slot, read: -1, incarnation: "inc-1"}); err == nil {
		t.Fatal("Check saved with its slot file unwritable")
	}
	if err := os.Remove(obstacle); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(fakeLease{slot: slot, read: -1, incarnation: "inc-1"}); err != nil {
		t.Fatal(err)
	}
	// The node serves on inc-1 and crashes; the pin is recreated meanwhile.
	s2, _ := Open(dir)
	g2, err := s2.Generator("g")
	if err != nil {
		t.Fatal(err)
	}
	if got := g2.Incarnation(); got != "inc-1" {
		t.Fatalf("after a restart the data dir remembers incarnation %q; Check passed on inc-1 without writing it", got)
	}
}

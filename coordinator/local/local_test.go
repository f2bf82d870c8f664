package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/firnid/firn/coordinator"
)

// fakeLease carries only what Check reads (pure logic: no coordinator).
type fakeLease struct {
	coordinator.Lease
	slot        coordinator.Slot
	read        int64
	incarnation string
}

func (f fakeLease) Slot() coordinator.Slot { return f.slot }
func (f fakeLease) ReadReserved() int64    { return f.read }
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

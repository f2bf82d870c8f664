package coordinator

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	stale, fresh := now.Add(-TakeBackAge-time.Millisecond), now.Add(-TakeBackAge)
	spec := Spec{Generator: "g", Layout: "L", WorkerLimit: 4, DatacenterLimit: 1, Datacenter: -1, MaxFloor: 1000, LocalFloor: -1}
	pin := NewPin(spec)
	me := NodeInfo{Name: "me", InstanceID: "me-1", Address: "10.0.0.1:7300"}
	rec := func(name, instance string, wall time.Time) OwnerRecord {
		return OwnerRecord{Name: name, Instance: instance, Address: name + ":7300", Wall: wall}
	}
	slot := func(w uint64) Slot { return Slot{Worker: w} }
	free := func(pos uint64, w uint64, r int64) Candidate {
		return Candidate{Kind: Free, Slot: slot(w), Pos: pos, Limit: spec.MaxFloor, Reserved: r}
	}
	marker := &RestoreEvidence{Generator: "g", Slot: slot(1), Acked: 50, Shown: 10, At: now, Node: me}

	type result struct {
		cands  []Candidate
		errIs  error
		errHas []string
		check  func(*testing.T, error)
	}
	for _, tc := range []struct {
		name string
		spec func(*Spec)
		scan Scan
		want result
	}{
		{
			name: "a marker refuses before anything, a missing or foreign pin included",
			scan: Scan{Marker: marker, Pin: &Pin{Layout: "other", Datacenter: -1}},
			want: result{errIs: ErrRestored, errHas: []string{`"g"`, "firn coordinator bump"}},
		},
		{
			name: "no pin scanned is the backend's mistake",
			scan: Scan{},
			want: result{errIs: errNoPin},
		},
		{
			name: "a pin for another layout",
			scan: Scan{Pin: &Pin{Layout: "other", Datacenter: -1, Schema: SchemaVersion}},
			want: result{errIs: ErrLayoutMismatch, errHas: []string{`"other"`, `"L"`}},
		},
		{
			name: "a pin from a newer schema",
			scan: Scan{Pin: &Pin{Layout: "L", Datacenter: -1, Schema: SchemaVersion + 1}},
			want: result{errIs: ErrSchemaTooNew},
		},
		{
			name: "the name held by another instance: the first clash in listing order",
			scan: Scan{Pin: &pin, Owners: []Owner{
				{Slot: slot(3), Record: rec("other", "o-1", fresh)},
				{Slot: slot(2), Record: rec("me", "me-0", fresh)},
				{Slot: slot(0), Record: rec("me", "me-9", fresh)},
			}},
			want: result{errIs: ErrNameInUse, check: func(t *testing.T, err error) {
				var ne *NameInUseError
				if !errors.As(err, &ne) || ne.Slot != slot(2) || ne.Instance != "me-0" || ne.Address != "me:7300" {
					t.Fatalf("NameInUseError %+v, want slot 2, instance me-0", ne)
				}
			}},
		},
		{
			name: "a fresh generator: every slot in cursor order",
			scan: Scan{Pin: &pin, Floor: -1},
			want: result{cands: []Candidate{free(0, 0, -1), free(1, 1, -1), free(2, 2, -1), free(3, 3, -1)}},
		},
		{
			name: "the walk starts at the cursor and wraps once; owned slots are skipped",
			scan: Scan{Pin: &pin, Floor: -1, Cursor: 6, Owners: []Owner{{Slot: slot(3), Record: rec("x", "x-1", fresh)}},
				Reserved: map[Slot]int64{slot(0): 40}},
			want: result{cands: []Candidate{free(6, 2, -1), free(8, 0, 40), free(9, 1, -1)}},
		},
		{
			name: "slots past max-lead are left out, the generator floor included",
			scan: Scan{Pin: &pin, Floor: 900, Reserved: map[Slot]int64{slot(1): 1001, slot(2): 1000}},
			want: result{cands: []Candidate{free(0, 0, -1), free(2, 2, 1000), free(3, 3, -1)}},
		},
		{
			name: "exhausted: live holders in listing order with their reservations, and the slots too far",
			scan: Scan{Pin: &pin, Floor: -1,
				Owners: []Owner{
					{Slot: slot(2), Record: rec("b", "b-1", fresh)},
					{Slot: slot(0), Record: rec("a", "a-1", fresh)},
				},
				Reserved: map[Slot]int64{slot(0): 7, slot(1): 5000, slot(3): 1001}},
			want: result{errIs: ErrExhausted, errHas: []string{"limit 4", "2 live holders", "2 free slots reserved past max-lead", `"b"`, `"a"`},
				check: func(t *testing.T, err error) {
					var ex *ExhaustedError
					errors.As(err, &ex)
					if ex.TooFar != 2 || ex.Floor != 0 || len(ex.Live) != 2 || ex.Live[0].Slot != slot(2) || ex.Live[0].Reserved != -1 ||
						ex.Live[1].Slot != slot(0) || ex.Live[1].Reserved != 7 || !ex.Live[1].Live || ex.Live[1].Heartbeat.Node.Name != "a" {
						t.Fatalf("ExhaustedError %+v", ex)
					}
				}},
		},
		{
			name: "exhausted by the generator floor: the error names it",
			scan: Scan{Pin: &pin, Floor: 1300},
			want: result{errIs: ErrExhausted, errHas: []string{"4 free slots reserved past max-lead", "generator floor 1300"}},
		},
		{
			name: "own stale records first, in slot order; fresh ones, other instances and the own session are not taken back",
			scan: Scan{Pin: &pin, Floor: -1, Cursor: 0,
				Owners: []Owner{
					{Slot: slot(3), Record: rec("me", "me-1", stale)},
					{Slot: slot(1), Record: rec("me", "me-1", stale)},
					{Slot: slot(0), Record: rec("me", "me-1", fresh)},
					{Slot: slot(2), Record: rec("me", "me-1", stale), OwnSession: true},
				},
				Reserved: map[Slot]int64{slot(1): 300}},
			want: result{check: func(t *testing.T, err error) {}, cands: []Candidate{
				{Kind: TakeBack, Slot: slot(1), Limit: 1000, Reserved: 300},
				{Kind: TakeBack, Slot: slot(3), Limit: 1000, Reserved: -1},
			}},
		},
		{
			name: "a take-back accepts up to the node's own floor, and no further",
			spec: func(s *Spec) { s.LocalFloor = 4000 },
			scan: Scan{Pin: &pin, Floor: -1,
				Owners: []Owner{
					{Slot: slot(0), Record: rec("me", "me-1", stale)},
					{Slot: slot(1), Record: rec("me", "me-1", stale)},
					{Slot: slot(2), Record: rec("other", "o-1", stale)},
				},
				Reserved: map[Slot]int64{slot(0): 4000, slot(1): 4001, slot(3): 4000}},
			want: result{cands: []Candidate{{Kind: TakeBack, Slot: slot(0), Limit: 4000, Reserved: 4000}}},
		},
		{
			name: "retakes after take-backs, before the walk; owned or foreign slots are not retaken",
			scan: Scan{Pin: &pin, Floor: -1, Cursor: 1,
				Owners:   []Owner{{Slot: slot(0), Record: rec("x", "x-1", fresh)}},
				Retake:   []Slot{slot(3), slot(0), {Datacenter: 1, Worker: 1}, slot(9)},
				Reserved: map[Slot]int64{slot(3): 20}},
			want: result{cands: []Candidate{
				{Kind: Retake, Slot: slot(3), Limit: 1000, Reserved: 20},
				free(1, 1, -1), free(2, 2, -1), free(3, 3, 20),
			}},
		},
		{
			name: "unread reservations are not judged: the take does",
			scan: Scan{Pin: &pin, Floor: -1, Unread: map[Slot]bool{slot(0): true, slot(1): true}, Reserved: map[Slot]int64{slot(2): 5000}},
			want: result{cands: []Candidate{
				{Kind: Free, Slot: slot(0), Pos: 0, Limit: 1000, Reserved: -1, Unread: true},
				{Kind: Free, Slot: slot(1), Pos: 1, Limit: 1000, Reserved: -1, Unread: true},
				free(3, 3, -1),
			}},
		},
		{
			name: "a fixed datacenter: the walk covers its workers only, foreign records are never taken back",
			spec: func(s *Spec) { s.DatacenterLimit, s.Datacenter, s.WorkerLimit = 4, 2, 2 },
			scan: Scan{Pin: &Pin{Layout: "L", Datacenter: 2}, Floor: -1,
				Owners: []Owner{{Slot: Slot{Datacenter: 1, Worker: 1}, Record: rec("me", "me-1", stale)}}},
			want: result{cands: []Candidate{
				{Kind: Free, Slot: Slot{Datacenter: 2, Worker: 0}, Pos: 0, Limit: 1000, Reserved: -1},
				{Kind: Free, Slot: Slot{Datacenter: 2, Worker: 1}, Pos: 1, Limit: 1000, Reserved: -1},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := spec
			if tc.spec != nil {
				tc.spec(&sp)
			}
			got, err := Plan(sp, me, tc.scan, now)
			if tc.want.errIs != nil {
				if !errors.Is(err, tc.want.errIs) || got != nil {
					t.Fatalf("Plan = %+v, %v; want an error matching %v", got, err, tc.want.errIs)
				}
				for _, s := range tc.want.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("error %q lacks %q", err, s)
					}
				}
				if tc.want.check != nil {
					tc.want.check(t, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			for i := range got {
				got[i].Owner = nil // compared below
			}
			if !reflect.DeepEqual(got, tc.want.cands) {
				t.Fatalf("Plan =\n%+v\nwant\n%+v", got, tc.want.cands)
			}
		})
	}
}

// TestPlanTakeBackOwner: a take-back names the record it replaces.
func TestPlanTakeBackOwner(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	spec := Spec{Generator: "g", Layout: "L", WorkerLimit: 2, DatacenterLimit: 1, Datacenter: -1, MaxFloor: 10, LocalFloor: -1}
	pin := NewPin(spec)
	old := OwnerRecord{Name: "me", Instance: "me-1", Wall: now.Add(-time.Hour)}
	got, err := Plan(spec, NodeInfo{Name: "me", InstanceID: "me-1"}, Scan{Pin: &pin, Floor: -1,
		Owners: []Owner{{Slot: Slot{Worker: 1}, Record: old}}}, now)
	if err != nil || len(got) != 2 || got[0].Kind != TakeBack || got[0].Owner == nil || got[0].Owner.Record != old ||
		got[1].Kind != Free || got[1].Slot != (Slot{Worker: 0}) || got[1].Owner != nil {
		t.Fatalf("Plan = %+v, %v; want the take-back of worker 1 naming its record, then worker 0", got, err)
	}
	if got[0].Kind.String() != "take-back" || Retake.String() != "retake" || Free.String() != "free" {
		t.Fatalf("kind names: %v %v %v", got[0].Kind, Retake, Free)
	}
}

// A slot the taker holds already (a wide generator's other worker) is
// never a candidate: not as its own stale record, not as a free slot
// whose lease ended without its holder knowing yet.
func TestPlanSkipsHeldSlots(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	spec := Spec{Generator: "g", Layout: "L", WorkerLimit: 4, DatacenterLimit: 1, Datacenter: -1, MaxFloor: 10, LocalFloor: -1,
		Held: map[Slot]bool{{Worker: 1}: true, {Worker: 2}: true}}
	pin := NewPin(spec)
	stale := OwnerRecord{Name: "me", Instance: "me-1", Wall: now.Add(-time.Hour)}
	got, err := Plan(spec, NodeInfo{Name: "me", InstanceID: "me-1"}, Scan{Pin: &pin, Floor: -1,
		Owners: []Owner{{Slot: Slot{Worker: 1}, Record: stale}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	var slots []Slot
	for _, c := range got {
		slots = append(slots, c.Slot)
	}
	if len(got) != 2 || got[0].Slot != (Slot{Worker: 0}) || got[1].Slot != (Slot{Worker: 3}) {
		t.Fatalf("Plan offers %v; want workers 0 and 3 (1 and 2 are held)", slots)
	}
	spec.Held = map[Slot]bool{{Worker: 0}: true, {Worker: 1}: true, {Worker: 2}: true, {Worker: 3}: true}
	if _, err := Plan(spec, NodeInfo{Name: "me", InstanceID: "me-1"}, Scan{Pin: &pin, Floor: -1,
		Owners: []Owner{{Slot: Slot{Worker: 1}, Record: stale}}}, now); !errors.Is(err, ErrExhausted) {
		t.Fatalf("every slot held: %v, want ErrExhausted", err)
	}
}

func TestCandidateTooFarAndContains(t *testing.T) {
	c := Candidate{Limit: 100}
	for _, tc := range []struct {
		r, floor int64
		want     bool
	}{{100, -1, false}, {101, -1, true}, {-1, 101, true}, {-1, -1, false}, {50, 100, false}} {
		if got := c.TooFar(tc.r, tc.floor); got != tc.want {
			t.Errorf("TooFar(%d, floor %d) = %v, want %v", tc.r, tc.floor, got, tc.want)
		}
	}
	s := Spec{WorkerLimit: 4, DatacenterLimit: 2, Datacenter: -1}
	for _, tc := range []struct {
		slot Slot
		want bool
	}{{Slot{0, 0}, true}, {Slot{1, 3}, true}, {Slot{2, 0}, false}, {Slot{0, 4}, false}} {
		if got := s.Contains(tc.slot); got != tc.want {
			t.Errorf("Contains(%v) = %v, want %v", tc.slot, got, tc.want)
		}
	}
	s.Datacenter = 1
	if s.Contains(Slot{0, 1}) || !s.Contains(Slot{1, 1}) {
		t.Error("a fixed datacenter contains its own workers only")
	}
}

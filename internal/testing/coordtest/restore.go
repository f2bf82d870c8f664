package coordtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
)

// evidence is what a node that had acked acknowledged and was shown shown
// on slot of generator would record.
func evidence(generator string, slot coordinator.Slot, acked, shown int64, node coordinator.NodeInfo) coordinator.RestoreEvidence {
	return coordinator.RestoreEvidence{Generator: generator, Slot: slot, Acked: acked, Shown: shown,
		At: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Node: node}
}

// marker is the generator's restore marker as Generators reports it (nil:
// none; the generator must be listed).
func marker(t testing.TB, c coordinator.Admin, generator string) (*coordinator.RestoreEvidence, coordinator.GeneratorState) {
	t.Helper()
	gs, err := c.Generators(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Generators: %v", err)
	}
	for _, g := range gs {
		if g.Name == generator {
			return g.Restore, g
		}
	}
	t.Fatalf("Generators %+v does not list %q", gs, generator)
	return nil, coordinator.GeneratorState{}
}

func wantRestored(t testing.TB, err error, want coordinator.RestoreEvidence) {
	t.Helper()
	var re *coordinator.RestoredError
	if !errors.As(err, &re) || !errors.Is(err, coordinator.ErrRestored) {
		t.Fatalf("got %v, want *RestoredError", err)
	}
	if re.Evidence != want {
		t.Fatalf("RestoredError evidence %+v, want %+v", re.Evidence, want)
	}
	for _, s := range []string{"coordinator state restored from an older snapshot", want.Generator, want.Node.Name,
		"firn coordinator bump --generator " + want.Generator} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("RestoredError %q does not name %q", err, s)
		}
	}
}

// RestoreMarkerBlocksAcquire: a holder's reservation lowered behind its
// back (a restore) is reported by its next Reserve; once the node records
// the evidence with MarkRestored, no node acquires for the generator —
// neither the noticing node nor a brand-new one with no local state —
// while another generator is not affected.
func RestoreMarkerBlocksAcquire(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("noticer")
	spec := Spec("marked", 4)
	l := mustAcquire(t, c, spec, n)
	mustReserve(t, l, 3000, n)
	cl.SetReserved(t, "marked", l.Slot(), 1000) // a restored snapshot
	err := l.Reserve(ctxT(t, 10*time.Second), 3100, Beat(n))
	var rb *coordinator.RolledBackError
	if !errors.As(err, &rb) || rb.Seen != 1000 || rb.Acked != 3000 {
		t.Fatalf("Reserve after the restore: %v, want RolledBackError 1000 < 3000", err)
	}
	ev := evidence("marked", l.Slot(), rb.Acked, rb.Seen, n)
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatalf("MarkRestored: %v", err)
	}
	// Idempotent.
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatalf("MarkRestored again: %v", err)
	}
	if got, _ := marker(t, c, "marked"); got == nil || *got != ev {
		t.Fatalf("Generators shows marker %+v, want %+v", got, ev)
	}
	// A brand-new node (no data dir: LocalFloor -1, another instance), on
	// another client.
	fresh := cl.Connect(t, sysClock)
	_, err = fresh.Acquire(ctxT(t, 10*time.Second), spec, Node("newcomer"))
	wantRestored(t, err, ev)
	// The noticing node itself, on its own client.
	_, err = c.Acquire(ctxT(t, 10*time.Second), spec, n)
	wantRestored(t, err, ev)
	// Another generator of the cluster acquires as usual.
	mustAcquire(t, fresh, Spec("unmarked", 4), Node("newcomer"))
	// Invalid evidence is refused.
	if err := c.MarkRestored(ctxT(t, 10*time.Second), evidence("marked", l.Slot(), 10, 10, n)); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("MarkRestored without a gap: %v, want ErrInvalidSpec", err)
	}
}

// RestoreMarkerKeepsHighestAcked: a standing marker is replaced only by
// evidence of a higher acknowledged value — what a bump must reach
// (MinBump) — whatever the gaps: evidence of an absent record counts its
// gap from the epoch, and kept for it, a marker would let a bump too
// small for a later finding clear it.
func RestoreMarkerKeepsHighestAcked(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c, d := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	slot := coordinator.Slot{Worker: 1}
	first := evidence("gaps", slot, 500, 400, Node("a"))                         // gap 100
	lower := evidence("gaps", slot, 450, 300, Node("b"))                         // gap 150, acked lower
	higher := evidence("gaps", coordinator.Slot{Worker: 2}, 900, 850, Node("c")) // gap 50, acked higher
	absent := evidence("gaps", coordinator.Slot{Worker: 3}, 800, -1, Node("d"))  // gap 801, acked lower
	for _, step := range []struct {
		c    coordinator.Backend
		ev   coordinator.RestoreEvidence
		want coordinator.RestoreEvidence
	}{
		{c, first, first},
		{d, lower, first},
		{d, higher, higher},
		{c, absent, higher},
		{c, first, higher},
	} {
		if err := step.c.MarkRestored(ctxT(t, 10*time.Second), step.ev); err != nil {
			t.Fatalf("MarkRestored(acked %d, gap %d): %v", step.ev.Acked, step.ev.Gap(), err)
		}
		// Read through the writer's own session: a ZooKeeper ensemble
		// orders each session's reads after its writes, not another's.
		if got, _ := marker(t, step.c, "gaps"); got == nil || *got != step.want {
			t.Fatalf("after MarkRestored(acked %d, gap %d): marker %+v, want acked %d (%+v)", step.ev.Acked, step.ev.Gap(), got, step.want.Acked, step.want)
		}
	}
	_, err := c.Acquire(ctxT(t, 10*time.Second), Spec("gaps", 4), Node("x"))
	wantRestored(t, err, higher)
	// A bump that leaves the floor below the highest acknowledged value is
	// refused (the bump's clock and every reservation at 100 or below).
	if r, err := bump(t, c, "gaps", 1, 100); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("bump by 1 at 100 under a marker acknowledged at 900: %+v, %v; want ErrInvalidSpec", r, err)
	}
}

// BumpClearsRestoreMarker: a bump whose By is below the marker's gap is
// refused, naming the gap and the generator, and writes nothing; one at or
// above it raises the floor and every reservation, clears the marker, and
// acquisitions work again above every bumped value.
func BumpClearsRestoreMarker(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := Spec("clear", 4)
	var ls []coordinator.Lease
	for i, r := range []int64{5000, 2000} {
		n := Node([]string{"p", "q"}[i])
		l := mustAcquire(t, c, spec, n)
		mustReserve(t, l, r, n)
		ls = append(ls, l)
	}
	cl.SetReserved(t, "clear", ls[0].Slot(), 3000) // restored: 5000 acknowledged, 3000 shown
	ev := evidence("clear", ls[0].Slot(), 5000, 3000, Node("p"))
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	admin := cl.Connect(t, sysClock)

	r, err := bump(t, admin, "clear", 1999, 100)
	if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), "2000") || !strings.Contains(err.Error(), `"clear"`) {
		t.Fatalf("bump by 1999 under a marker with gap 2000: %+v, %v; want ErrInvalidSpec naming the gap and the generator", r, err)
	}
	if got := cl.Reserved(t, "clear", ls[0].Slot()); got != 3000 {
		t.Fatalf("a refused bump changed a reservation to %d", got)
	}
	if got, st := marker(t, admin, "clear"); got == nil || *got != ev || st.Floor != -1 {
		t.Fatalf("after a refused bump: marker %+v, floor %d; want the marker and no floor", got, st.Floor)
	}

	r, err = bump(t, admin, "clear", 2000, 100)
	if err != nil {
		t.Fatalf("bump by the gap: %v", err)
	}
	if r.Cleared == nil || *r.Cleared != ev || r.Floor != 3000+2000 {
		t.Fatalf("bump by 2000: %+v, want floor 5000 (max(100, 3000, 2000) + 2000) and the marker cleared", r)
	}
	if got, st := marker(t, admin, "clear"); got != nil || st.Floor != 5000 {
		t.Fatalf("after the bump: marker %+v, floor %d; want none and 5000", got, st.Floor)
	}
	for i, want := range []int64{5000, 4000} {
		if got := cl.Reserved(t, "clear", ls[i].Slot()); got != want {
			t.Fatalf("%s reserved %d after the bump, want %d", ls[i].Slot(), got, want)
		}
	}
	// Nodes acquire again, above every bumped value, the newcomer with no
	// local state included.
	l := mustAcquire(t, cl.Connect(t, sysClock), spec, Node("newcomer"))
	if l.Floor() < 5000 {
		t.Fatalf("acquisition after the bump has Floor %d, want >= 5000", l.Floor())
	}
	// A second bump with no marker clears nothing.
	if r, err := bump(t, admin, "clear", 10, 0); err != nil || r.Cleared != nil {
		t.Fatalf("bump without a marker: %+v, %v", r, err)
	}
}

// BumpPastMaxTimeWritesNothing: a bump whose floor would pass the layout's
// last time value is refused before anything is written: reservations,
// floor and marker stay as they were.
func BumpPastMaxTimeWritesNothing(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("m")
	l := mustAcquire(t, c, Spec("maxtime", 2), n)
	mustReserve(t, l, 900, n)
	ev := evidence("maxtime", l.Slot(), 950, 900, n)
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	for _, bs := range []coordinator.BumpSpec{
		{Generator: "maxtime", By: 200, Now: 10, MaxTime: 1000},  // 900 + 200 > 1000
		{Generator: "maxtime", By: 100, Now: 950, MaxTime: 1000}, // now 950 + 100 > 1000
	} {
		r, err := c.Bump(ctxT(t, 10*time.Second), bs)
		if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), "1000") {
			t.Fatalf("Bump %+v: %+v, %v; want ErrInvalidSpec naming the last time value 1000", bs, r, err)
		}
	}
	if got := cl.Reserved(t, "maxtime", l.Slot()); got != 900 {
		t.Fatalf("reservation %d after refused bumps, want 900", got)
	}
	if got, st := marker(t, c, "maxtime"); got == nil || *got != ev || st.Floor != -1 {
		t.Fatalf("after refused bumps: marker %+v, floor %d; want the marker kept and no floor", got, st.Floor)
	}
	r, err := c.Bump(ctxT(t, 10*time.Second), coordinator.BumpSpec{Generator: "maxtime", By: 100, Now: 10, MaxTime: 1000})
	if err != nil || r.Floor != 1000 || r.Cleared == nil {
		t.Fatalf("bump to exactly the last time value: %+v, %v; want floor 1000 and the marker cleared", r, err)
	}
}

// BumpRefusesReservationsAhead: a bump that finds reservations beyond its
// clock plus MaxAhead — written by a clock ahead of its own — refuses before
// anything is written, naming each such worker and its live holder (or
// that it has none); told to include them, it bumps as before, the floor
// following them.
func BumpRefusesReservationsAhead(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := Spec("ahead", 4)
	fine, fast, gone := Node("fine"), Node("fast"), Node("gone")
	lf := mustAcquire(t, c, spec, fine)
	mustReserve(t, lf, 1005, fine) // within now 1000 + MaxAhead 10
	la := mustAcquire(t, c, spec, fast)
	mustReserve(t, la, 4600, fast) // an hour of units ahead, say
	lg := mustAcquire(t, c, spec, gone)
	mustReserve(t, lg, 2000, gone)
	if err := lg.Release(ctxT(t, 10*time.Second), 2000); err != nil {
		t.Fatal(err)
	}
	ev := evidence("ahead", lf.Slot(), 1003, 900, fine)
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	spec0 := coordinator.BumpSpec{Generator: "ahead", By: 50, Now: 1000, MaxTime: bigFloor, MaxAhead: 10}
	r, err := c.Bump(ctxT(t, 10*time.Second), spec0)
	var ae *coordinator.AheadError
	if !errors.As(err, &ae) || !errors.Is(err, coordinator.ErrAhead) {
		t.Fatalf("bump over reservations ahead: %+v, %v; want an *AheadError matching ErrAhead", r, err)
	}
	if ae.Generator != "ahead" || ae.Now != 1000 || ae.Limit != 1010 || len(ae.Ahead) != 2 {
		t.Fatalf("AheadError %+v: want generator ahead, now 1000, limit 1010, two workers", ae)
	}
	byName := map[coordinator.Slot]coordinator.SlotState{}
	for _, h := range ae.Ahead {
		byName[h.Slot] = h
	}
	if h := byName[la.Slot()]; h.Reserved != 4600 || !h.Live || h.Heartbeat.Node.Name != "fast" {
		t.Fatalf("the fast worker: %+v, want reserved 4600, live, held by node fast", h)
	}
	if h := byName[lg.Slot()]; h.Reserved != 2000 || h.Live {
		t.Fatalf("the released worker: %+v, want reserved 2000, no live holder", h)
	}
	for _, want := range []string{la.Slot().String(), `"fast"`, "4600", lg.Slot().String(), "no live holder", "1010"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not name %q", err.Error(), want)
		}
	}
	// Nothing was written: reservations, floor and marker as they were.
	for slot, want := range map[coordinator.Slot]int64{lf.Slot(): 1005, la.Slot(): 4600, lg.Slot(): 2000} {
		if got := cl.Reserved(t, "ahead", slot); got != want {
			t.Fatalf("%s reserved %d after the refused bump, want %d", slot, got, want)
		}
	}
	if got, st := marker(t, c, "ahead"); got == nil || *got != ev || st.Floor != -1 {
		t.Fatalf("after the refused bump: marker %+v, floor %d; want the marker kept and no floor", got, st.Floor)
	}
	// A limit above every reservation passes; so does IncludeAhead, and the
	// floor then follows the reservation ahead.
	wide := spec0
	wide.MaxAhead = 3600
	wide.By = 1
	if _, err := c.Bump(ctxT(t, 10*time.Second), wide); err != nil {
		t.Fatalf("bump with every reservation within MaxAhead: %v", err)
	}
	incl := spec0
	incl.IncludeAhead = true
	r, err = c.Bump(ctxT(t, 10*time.Second), incl)
	if err != nil || r.Floor != 4601+50 {
		t.Fatalf("bump with IncludeAhead: %+v, %v; want floor 4651 (the reservation ahead, bumped by 1, + 50)", r, err)
	}
	if got := cl.Reserved(t, "ahead", la.Slot()); got != 4651 {
		t.Fatalf("the fast worker reserved %d after both bumps, want 4651", got)
	}
	// Reservations at or below the generator floor are an earlier bump's
	// doing, not a clock's: the next bump takes them without being told.
	if r, err := c.Bump(ctxT(t, 10*time.Second), spec0); err != nil || r.Floor != 4651+50 {
		t.Fatalf("bump over reservations at or below the floor: %+v, %v; want floor 4701", r, err)
	}
}

// GeneratorsListed: Generators lists every generator of the cluster with
// its pin, floor and marker, sorted by name, and nothing of another
// cluster.
func GeneratorsListed(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	other := b.NewCluster(t).Connect(t, sysClock)
	mustAcquire(t, other, Spec("elsewhere", 2), Node("o"))
	mustAcquire(t, c, Spec("zeta", 2), Node("z"))
	sb := Spec("alpha", 2)
	sb.Layout = layoutB
	mustAcquire(t, c, sb, Node("a"))
	if _, err := bump(t, c, "alpha", 50, 1000); err != nil {
		t.Fatal(err)
	}
	gs, err := c.Generators(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].Name != "alpha" || gs[1].Name != "zeta" {
		t.Fatalf("Generators = %+v, want alpha and zeta", gs)
	}
	if gs[0].Pin.Layout != layoutB || gs[0].Pin.Incarnation == "" || gs[0].Floor != 1050 || gs[0].Restore != nil {
		t.Fatalf("alpha: %+v, want layout %q, an incarnation, floor 1050, no marker", gs[0], layoutB)
	}
	if gs[1].Pin.Layout != layoutA || gs[1].Floor != -1 {
		t.Fatalf("zeta: %+v, want layout %q and no floor", gs[1], layoutA)
	}
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
)

// action is one moment of the schedule.
type action struct {
	at   time.Duration
	what string
	do   func(w *world)
}

type schedule struct{ actions []action }

// plan draws the run's shape from the seed — how many nodes, which layout,
// NTP or not — and its faults.
func (w *world) plan() *schedule {
	r := w.rng
	nodes := 2 + r.Intn(3) // 2..4
	w.spec = "snowflake"
	if r.Intn(4) == 0 {
		// Two worker bits: with four nodes, workers run out.
		w.spec = "time=41,dc=0,worker=2,seq=12,unit=1ms,epoch=2026-01-01T00:00:00Z"
	}
	w.ntp = r.Intn(2) == 0
	// A third of the snowflake seeds run wide nodes (2 or 3 workers per
	// generator). Drawn from a source of their own, so that every seed's
	// faults stay what they were before nodes could be wide.
	w.workers = 1
	if wr := rand.New(rand.NewSource(w.o.Seed*7919 + 17)); w.spec == "snowflake" && wr.Intn(3) == 0 {
		w.workers = 2 + wr.Intn(2)
	}
	// A fifth of the snowflake seeds run a layout whose sequence lies
	// above the node fields instead, with 1, 2 or 3 workers per node: one
	// worker's IDs in one unit are not consecutive, a range's runs hold
	// one ID each, and a wide node's per-node order interleaves its
	// workers' IDs one by one (docs/design.md, Wide generators; Ranges).
	// It is sonyflake's (10 ms units, 8 sequence bits, the node fields at
	// the bottom) with 2 datacenter and 6 worker bits for sonyflake's 16
	// machine bits: each acquisition plans over every slot, and 65,536 of
	// them cost the simulator more than the rest of the seed. From a
	// source of its own too.
	if lr := rand.New(rand.NewSource(w.o.Seed*15485863 + 29)); w.spec == "snowflake" && lr.Intn(5) == 0 {
		w.spec = "time=39,dc=2,worker=6,seq=8,unit=10ms,epoch=2014-09-01T00:00:00Z,order=time-seq-dc-worker"
		w.workers = 1 + lr.Intn(3)
	}
	var err error
	if l, ok := generator.Preset(w.spec); ok {
		w.layout = l
	} else if w.layout, err = generator.ParseLayout(w.spec); err != nil {
		panic(err)
	}
	w.shape = newIDShape(w.layout)
	// What the schedule adds beside the faults drawn from r (the fresh
	// node at a restore) is drawn from a source of its own, so that every
	// seed's faults stay what they were.
	w.xr = rand.New(rand.NewSource(w.o.Seed*7907 + 3))
	for i := range nodes {
		w.nodes = append(w.nodes, w.newNode(i))
	}
	w.note("seed %d: %d nodes %v, layout %s, %d workers each, NTP %v, %v virtual", w.o.Seed, nodes, sortedNames(w.nodes), w.spec, w.workers, w.ntp, w.o.Virtual)

	s := &schedule{}
	busy := map[string]time.Duration{} // a resource's faults do not overlap
	span := w.o.Virtual
	faults := int(span / (15 * time.Second))
	for range faults {
		at := time.Duration(5+r.Int63n(int64((span-30*time.Second)/time.Second))) * time.Second
		at += time.Duration(r.Intn(1000)) * time.Millisecond
		n := w.nodes[r.Intn(len(w.nodes))]
		kind := r.Intn(14)
		var res string
		switch kind {
		case 0, 1, 2:
			res = "clock/" + n.name
		case 3, 4:
			res = "ntp"
		case 5, 6, 7, 8:
			res = "coord"
		default:
			res = "node/" + n.name
		}
		if busy[res] > at {
			continue
		}
		d := s.fault(w, kind, at, n)
		busy[res] = at + d + time.Second
	}
	if w.seqRun {
		s.seqPartitions(w)
	}
	sort.SliceStable(s.actions, func(i, j int) bool { return s.actions[i].at < s.actions[j].at })
	return s
}

// fault adds one fault at time at, and says how long it lasts.
func (s *schedule) fault(w *world, kind int, at time.Duration, n *node) time.Duration {
	r := w.rng
	add := s.add
	dur := time.Duration(1+r.Intn(20)) * time.Second
	switch kind {
	case 0, 1, 2: // a clock step, then back
		sizes := []time.Duration{5 * time.Millisecond, 300 * time.Millisecond, time.Second, 1500 * time.Millisecond,
			5 * time.Second, time.Hour}
		if !w.ntp && len(w.nodes) < 2 {
			// Nothing can confirm a forward step: it is accepted, and
			// after its correction the node waits out its size (the
			// documented outage). Keep those within the settle bound.
			sizes = sizes[:len(sizes)-1]
		}
		size := sizes[r.Intn(len(sizes))]
		if r.Intn(2) == 0 {
			size = -size
		}
		add(at, fmt.Sprintf("%s clock %+v", n.name, size), func(*world) { n.clock.SetOffset(size) })
		add(at+dur, fmt.Sprintf("%s clock back", n.name), func(*world) { n.clock.SetOffset(0) })
	case 3, 4: // NTP offset or silence
		if !w.ntp {
			return 0
		}
		if kind == 3 {
			// NTP wrong by an hour would confirm a node's own +1h
			// step, and the node would then wait the hour out after the
			// correction, as designed: not a fault the bounds can hold.
			off := []time.Duration{100 * time.Millisecond, time.Second}[r.Intn(2)]
			add(at, fmt.Sprintf("NTP says clocks are off by %v", off), func(w *world) { w.setNTP(off, false) })
		} else {
			add(at, "NTP silent", func(w *world) { w.setNTP(0, true) })
		}
		add(at+dur, "NTP normal", func(w *world) { w.setNTP(0, false) })
	case 5: // coordinator latency
		lat := []time.Duration{10 * time.Millisecond, 200 * time.Millisecond, 900 * time.Millisecond}[r.Intn(3)]
		add(at, fmt.Sprintf("coordinator latency %v", lat), func(w *world) {
			w.faults(func(f *memory.Faults) { f.SetLatency(memory.OpAll, lat) })
			w.coordFault(true)
		})
		add(at+dur, "coordinator latency ends", func(w *world) {
			w.faults(func(f *memory.Faults) { f.SetLatency(memory.OpAll, 0) })
			w.coordFault(false)
		})
	case 6: // coordinator unavailable
		a := []memory.Availability{memory.Refusing, memory.Hanging}[r.Intn(2)]
		dur = time.Duration(500+r.Intn(8000)) * time.Millisecond
		add(at, fmt.Sprintf("coordinator %v", a), func(w *world) {
			w.faults(func(f *memory.Faults) { f.SetAvailability(memory.OpAll, a) })
			w.coordFault(true)
		})
		add(at+dur, "coordinator available", func(w *world) {
			w.faults(func(f *memory.Faults) { f.SetAvailability(memory.OpAll, memory.Available) })
			w.coordFault(false)
		})
	case 7: // lost replies
		k := 1 + r.Intn(3)
		add(at, fmt.Sprintf("the next %d write replies are lost", k), func(w *world) { w.faults(func(f *memory.Faults) { f.LoseReplies(memory.OpWrites, k) }) })
		dur = 0
	case 8: // a restore to a snapshot taken earlier, then the operator's bump
		dur = s.restore(w, at)
	case 9: // frozen past its lease TTL, then thawed
		dur = time.Duration(2+r.Intn(10)) * time.Second
		add(at, fmt.Sprintf("%s frozen", n.name), func(*world) { n.freeze(true) })
		add(at+dur, fmt.Sprintf("%s thawed", n.name), func(*world) { n.freeze(false) })
	case 10: // killed, restarted with or without its data dir
		wipe := r.Intn(4) == 0
		dur = time.Duration(500+r.Intn(8000)) * time.Millisecond
		add(at, fmt.Sprintf("%s killed", n.name), func(*world) { n.stopNode(false) })
		add(at+dur, fmt.Sprintf("%s restarted (data dir wiped: %v)", n.name, wipe), func(w *world) {
			if err := n.startNode(wipe); err != nil {
				w.violate("%s: restart: %v", n.name, err)
			}
		})
	case 13: // a zombie: frozen while a replacement takes its worker back, then thawed
		dur = s.zombie(w, at, n)
	case 11: // a burst of large batches
		add(at, fmt.Sprintf("%s callers burst", n.name), func(*world) { n.set(func() { n.burst = true }) })
		add(at+dur, fmt.Sprintf("%s callers calm", n.name), func(*world) { n.set(func() { n.burst = false }) })
	default: // an idle stretch, or a graceful restart
		if r.Intn(2) == 0 {
			dur = time.Duration(5+r.Intn(55)) * time.Second
			add(at, fmt.Sprintf("%s callers idle", n.name), func(*world) { n.set(func() { n.paused = true }) })
			add(at+dur, fmt.Sprintf("%s callers back", n.name), func(*world) { n.set(func() { n.paused = false }) })
		} else {
			dur = time.Second
			add(at, fmt.Sprintf("%s restarted gracefully", n.name), func(w *world) {
				n.stopNode(true)
				if err := n.startNode(false); err != nil {
					w.violate("%s: restart: %v", n.name, err)
				}
			})
		}
	}
	return dur
}

// restore schedules a restore of the coordinator to a snapshot taken at
// at, a fresh node started on it, and the operator's bump; it returns how
// long the fault lasts.
func (s *schedule) restore(w *world, at time.Duration) time.Duration {
	r := w.rng
	gap := time.Duration(2+r.Intn(20)) * time.Second
	var snap, csnap, qsnap *memory.Snapshot
	s.add(at, "snapshot of the coordinator", func(w *world) {
		snap = w.store.Snapshot()
		qsnap = w.qstore.Snapshot()
		if segmentRestores {
			csnap = w.cstore.Snapshot()
		}
	})
	// A fresh node (an empty data dir) reaches the restored
	// coordinator right after the restore, before any holder noticed
	// it: a worker taken since the snapshot looks free to it. Its
	// take must start above anything the worker's holder may have
	// issued (docs/design.md, Restarts, shutdown, restores).
	fresh := w.freshNode()
	s.add(at+gap, fmt.Sprintf("coordinator restored to the snapshot of %v ago; %s starts with an empty data dir", gap, fresh.name), func(w *world) {
		// Counted before the store is restored: a call's check reads the
		// store's reservations under w.mu (world.received), and must see
		// either the store before the restore or the restore counted.
		w.mu.Lock()
		w.restores++
		w.restoredAt = time.Now()
		w.mu.Unlock()
		w.store.Restore(snap)
		if csnap != nil {
			w.cstore.Restore(csnap)
		}
		var leased map[*seqLease]bool
		if w.seqRun {
			leased = w.seqBeforeRestore()
		}
		w.qstore.Restore(qsnap)
		if w.seqRun {
			w.seqAfterRestore(leased)
			w.seqRestored()
		}
		var segAt *segment.Counter
		if csnap != nil {
			segAt = w.segCounterNow()
		}
		w.mu.Lock()
		if csnap != nil {
			w.segRestored++
			w.segAtRestore = segAt
		}
		w.restoredAt = time.Now()
		w.mu.Unlock()
		w.nodes = append(w.nodes, fresh)
		if err := fresh.startNode(false); err != nil {
			w.violate("%s: start: %v", fresh.name, err)
		}
	})
	// It stays (to the settle, where every node must serve) now and
	// then when the layout has workers to spare, else it ends later,
	// killed or stopped.
	if w.layout.WorkerLimit()*w.layout.DatacenterLimit() < 64 || w.xr.Intn(5) != 0 {
		end := gap + time.Duration(5+w.xr.Intn(40))*time.Second
		kill := w.xr.Intn(2) == 0
		s.add(at+end, fmt.Sprintf("%s stopped (killed: %v)", fresh.name, kill), func(*world) { fresh.stopNode(!kill) })
	}
	by := gap + 6*time.Second
	s.add(at+gap+time.Duration(r.Intn(3000))*time.Millisecond, fmt.Sprintf("operator bumps by %v", by), func(w *world) {
		w.bump(by)
		if segmentRestores {
			w.bumpCounter()
		}
		if w.seqRun {
			w.bumpSeq(true)
		}
	})
	dur := gap + 10*time.Second
	s.add(at+dur, "operator bumps any marker left", func(w *world) {
		w.bumpMarkers()
		if segmentRestores {
			w.bumpCounterMarker()
		}
		if w.seqRun {
			w.bumpSeq(false)
		}
	})
	return dur
}

// zombie schedules n frozen while a replacement on its data dir takes its
// worker back, then thawed beside it; it returns how long the fault lasts.
func (s *schedule) zombie(w *world, at time.Duration, n *node) time.Duration {
	s.add(at, fmt.Sprintf("%s frozen; a replacement starts on its data dir", n.name), func(*world) { n.freeze(true) })
	rep := &node{w: w, name: n.name + "'", dir: "", clock: n.clock}
	s.add(at+2500*time.Millisecond, fmt.Sprintf("%s' starts on %s's data dir (takes its worker back)", n.name, n.name), func(w *world) {
		n.mu.Lock()
		up, dir := n.up, n.dir
		n.mu.Unlock()
		if !up {
			return
		}
		rep.dir = dir
		if err := rep.startNode(false); err != nil {
			w.violate("%s: start: %v", rep.name, err)
		}
	})
	s.add(at+3500*time.Millisecond, fmt.Sprintf("%s thawed (a zombie beside %s')", n.name, n.name), func(*world) { n.freeze(false) })
	dur := 10 * time.Second
	s.add(at+dur, fmt.Sprintf("%s' killed", n.name), func(*world) { rep.stopNode(false) })
	return dur
}

// add schedules do at at.
func (s *schedule) add(at time.Duration, what string, do func(*world)) {
	s.actions = append(s.actions, action{at: at, what: what, do: do})
}

// run plays the schedule in (virtual) time.
func (s *schedule) run(w *world) {
	for _, a := range s.actions {
		if d := a.at - time.Since(w.start); d > 0 {
			time.Sleep(d)
		}
		w.note("%s", a.what)
		a.do(w)
	}
	if d := w.o.Virtual - time.Since(w.start); d > 0 {
		time.Sleep(d)
	}
}

func (n *node) set(f func()) {
	n.mu.Lock()
	f()
	n.mu.Unlock()
}

// freeze stops (or lets go) the node's coordinator client and its
// callers, as SIGSTOP would stop its process's traffic.
func (n *node) freeze(on bool) {
	n.mu.Lock()
	if !n.up || n.frozen == on {
		n.mu.Unlock()
		return
	}
	n.frozen = on
	if on {
		n.client.Freeze()
		n.cclient.Freeze()
		n.qclient.Freeze()
		n.frozeLocked()
		n.mu.Unlock()
		return
	}
	n.client.Thaw()
	n.cclient.Thaw()
	qclient := n.qclient
	n.mu.Unlock()
	// The calls that waited for the process are served before it hears
	// from the sequence store (seqs.go, seqThawFirst).
	n.thawed()
	if n.w.seqRun && seqThawFirst {
		synctest.Wait()
	}
	qclient.Thaw()
}

// faults applies f to the faults of both stores: the main one and the
// counters'.
func (w *world) faults(f func(*memory.Faults)) {
	f(w.store.Faults())
	f(w.cstore.Faults())
	f(w.qstore.Faults())
}

func (w *world) setNTP(offset time.Duration, silent bool) {
	w.mu.Lock()
	w.ntpOffset, w.ntpSilent = offset, silent
	w.mu.Unlock()
	for _, n := range w.nodes {
		n.mu.Lock()
		f := n.ntp
		up := n.up
		n.mu.Unlock()
		if f != nil && up {
			f.Trigger()
		}
	}
}

// bump is the operator's `firn coordinator bump --by D`.
func (w *world) bump(by time.Duration) {
	admin := w.store.Connect(w.base)
	defer admin.Close()
	wall, _ := w.base.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	units := int64(by / w.layout.Unit)
	// As `firn coordinator bump` does by default: reservations beyond the
	// clock plus the window, max-lead and a second of skew are refused,
	// naming their workers; the operator reads it and bumps over them.
	ahead := 5*time.Second + generator.DefaultMaxLead(w.layout) + time.Second
	spec := coordinator.BumpSpec{Generator: generatorName, By: units, Now: w.layout.Units(wall), MaxTime: w.layout.MaxTime(),
		MaxAhead: int64(ahead/w.layout.Unit) + 1}
	res, err := admin.Bump(ctx, spec)
	var ae *coordinator.AheadError
	if errors.As(err, &ae) {
		w.note("bump by %v refused: %v", by, err)
		if len(ae.Ahead) == 0 || !strings.Contains(err.Error(), ae.Ahead[0].Slot.String()) {
			w.violate("a bump refused over reservations ahead names none: %v", err)
		}
		spec.IncludeAhead = true
		res, err = admin.Bump(ctx, spec)
	}
	if err != nil {
		w.note("bump by %v: %v", by, err)
		return
	}
	w.note("bumped: floor %d, marker cleared: %v", res.Floor, res.Cleared != nil)
	w.mu.Lock()
	w.bumpedTo = w.layout.UnitStart(res.Floor).Add(-era) // in the bubble's own time
	w.mu.Unlock()
}

// bumpMarkers bumps once more when a marker stands (a node noticed the
// restore after the first bump), by what the marker asks.
func (w *world) bumpMarkers() {
	admin := w.store.Connect(w.base)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	gens, err := admin.Generators(ctx)
	cancel()
	admin.Close()
	if err != nil {
		w.note("generators: %v", err)
		return
	}
	for _, g := range gens {
		if g.Name == generatorName && g.Restore != nil {
			wall, _ := w.base.Now()
			w.bump(time.Duration(g.Restore.MinBump(w.layout.Units(wall)))*w.layout.Unit + 6*time.Second)
		}
	}
}

package coordtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/generator"
)

// DecisiveOptions tunes Decisive; zero values take the defaults.
type DecisiveOptions struct {
	Holders  int           // concurrent holders; default 3
	Workers  uint8         // worker bits of the layout; default 2 (4 slots, so slots are reused)
	Duration time.Duration // churn time; default 8 s
	Window   time.Duration // reservation window; default 200 ms
	Interval time.Duration // Reserver interval; default 300 ms (> Window: holders wait)
	MaxIDs   int           // per holder, bounds memory; default 2 M
	LifeIDs  int           // per lease, spreads IDs over the run; default 150 k
}

// churn actions, taken in turn by each holder.
var churnActions = []string{"release", "expire", "kill", "restart"}

// Decisive is the decisive check: several holders, each with its own data
// dir, drive a snowflake-shaped generator (2 worker bits by default, so
// worker IDs are reused all the time) on each lease, with a Reserver on a
// reservation window shorter than its interval, so every holder waits on
// its reservation. They churn their leases (release, expire, kill,
// restart) for a bounded time. Every ID emitted is collected; none may
// repeat, and every holder must have waited on its reservation.
func Decisive(t *testing.T, b Backend, o DecisiveOptions) {
	if o.Holders == 0 {
		o.Holders = 3
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	if o.Duration == 0 {
		o.Duration = 8 * time.Second
	}
	if o.Window == 0 {
		o.Window = 200 * time.Millisecond
	}
	if o.Interval == 0 {
		o.Interval = 300 * time.Millisecond
	}
	if o.MaxIDs == 0 {
		o.MaxIDs = 2_000_000
	}
	if o.LifeIDs == 0 {
		o.LifeIDs = 150_000
	}
	lay, ok := generator.Preset("snowflake")
	if !ok {
		t.Fatal("no snowflake preset")
	}
	lay.DatacenterBits, lay.WorkerBits = 0, o.Workers
	wall, _ := sysClock.Now()
	if err := lay.Validate(wall); err != nil {
		t.Fatalf("layout: %v", err)
	}
	cl := b.NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), o.Duration+60*time.Second)
	defer cancel()
	start := time.Now()

	holders := make([]*decisiveHolder, o.Holders)
	var wg sync.WaitGroup
	for i := range holders {
		st, err := datadir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.Generator("decisive")
		if err != nil {
			t.Fatal(err)
		}
		n := Node(fmt.Sprintf("holder%d", i))
		n.InstanceID = st.InstanceID()
		h := &decisiveHolder{t: t, b: b, cl: cl, lay: lay, o: o, idx: i, node: n, jr: g, actions: map[string]int{}}
		holders[i] = h
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.run(ctx, start)
		}()
	}
	wg.Wait()

	var all []uint64
	for _, h := range holders {
		t.Logf("holder %d: %d IDs, %d acquisitions, %d reservation waits, actions %v, reserver writes %d failures %d",
			h.idx, len(h.ids), h.acquisitions, h.waits, h.actions, h.writes, h.failures)
		if h.waits == 0 {
			t.Errorf("holder %d never waited on its reservation", h.idx)
		}
		if h.acquisitions < 2 {
			t.Errorf("holder %d acquired only %d times: no churn", h.idx, h.acquisitions)
		}
		all = append(all, h.ids...)
	}
	if len(all) == 0 {
		t.Fatal("no IDs emitted")
	}
	slices.Sort(all)
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			if dups < 5 {
				p, _ := lay.Decode(all[i])
				t.Errorf("ID %d emitted twice (%+v)", all[i], p)
			}
			dups++
		}
	}
	if dups > 0 {
		t.Fatalf("%d duplicate IDs among %d", dups, len(all))
	}
	t.Logf("%d IDs from %d holders, none repeated", len(all), len(holders))
}

type decisiveHolder struct {
	t    *testing.T
	b    Backend
	cl   Cluster
	lay  generator.Layout
	o    DecisiveOptions
	idx  int
	node coordinator.NodeInfo
	jr   *datadir.Gen

	ids          []uint64
	acquisitions int
	waits        uint64
	writes       uint64
	failures     uint64
	actions      map[string]int
	round        int
}

func (h *decisiveHolder) units(d time.Duration) int64 { return int64(d / h.lay.Unit) }

func (h *decisiveHolder) nowUnits() int64 {
	w, _ := sysClock.Now()
	return h.lay.Units(w)
}

func (h *decisiveHolder) run(ctx context.Context, start time.Time) {
	for time.Since(start) < h.o.Duration && ctx.Err() == nil {
		if err := h.once(ctx); err != nil {
			h.t.Errorf("holder %d: %v", h.idx, err)
			return
		}
	}
}

// once is one life of the holder: connect, acquire, generate, churn.
func (h *decisiveHolder) once(ctx context.Context) error {
	c, err := h.b.Dial(h.cl.Endpoint(), sysClock)
	if err != nil {
		return err
	}
	defer c.Close()
	spec := coordinator.Spec{Generator: "decisive", Layout: h.lay.String(), WorkerLimit: h.lay.WorkerLimit(),
		DatacenterLimit: h.lay.DatacenterLimit(), Datacenter: -1}
	maxLead := generator.DefaultMaxLead(h.lay)
	var l coordinator.Lease
	for l == nil {
		spec.MaxFloor = h.nowUnits() + h.units(maxLead)
		spec.LocalFloor = h.jr.LocalFloor()
		l, err = c.Acquire(ctx, spec, h.node)
		switch {
		case err == nil:
		case errors.Is(err, coordinator.ErrExhausted) && ctx.Err() == nil:
			time.Sleep(100 * time.Millisecond) // every slot busy or reserved ahead
		default:
			return fmt.Errorf("acquire: %w", err)
		}
	}
	h.acquisitions++
	if err := h.jr.Check(l); err != nil {
		return fmt.Errorf("local state check: %w", err)
	}
	gen, err := generator.New(generator.Config{Layout: h.lay, Worker: l.WorkerID(), Datacenter: l.Datacenter(),
		Clock: sysClock, Floor: l.Floor(), Reserved: max(l.Floor(), 0), MaxLead: maxLead})
	if err != nil {
		return fmt.Errorf("generator: %w", err)
	}
	rs, err := coordinator.NewReserver(coordinator.ReserverConfig{
		Lease: l, Node: h.node, Clock: sysClock, Now: h.nowUnits, Logical: gen.Logical, Journal: h.jr,
		OnAck: gen.SetReserved, Window: h.units(h.o.Window), MaxUntil: h.lay.MaxTime(),
		Interval: h.o.Interval, CallTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	rdone := make(chan error, 1)
	go func() { rdone <- rs.Run(rctx) }()
	finish := func() {
		h.waits += gen.ReservationWaits()
		h.writes += rs.Writes()
		h.failures += rs.Failures()
	}

	action := churnActions[(h.idx+h.round)%len(churnActions)]
	h.round++
	h.actions[action]++
	life := 400*time.Millisecond + time.Duration(rand.Int64N(int64(600*time.Millisecond)))
	if err := h.generate(ctx, gen, rdone, life); err != nil {
		return err
	}
	switch action {
	case "release":
		rcancel()
		<-rdone
		gen.Retire()
		hi := gen.Highest()
		if err := h.jr.BeforeRelease(l.Slot(), max(hi, l.Floor())); err != nil {
			return err
		}
		if err := l.Release(ctx, hi); err != nil && !errors.Is(err, coordinator.ErrLeaseLost) {
			return fmt.Errorf("release: %w", err)
		}
	case "expire":
		// Ownership ends behind the holder's back; it keeps generating
		// until its Reserver finds out.
		h.cl.Expire(h.t, l)
		if err := h.generate(ctx, gen, rdone, 10*time.Second); err != nil {
			return err
		}
		gen.Retire()
	case "kill":
		// The process dies: nothing more is written, ownership lingers.
		gen.Retire()
		h.cl.Kill(h.t, c)
		rcancel()
		<-rdone
	case "restart":
		// A stop without a release: the lease is revoked by Close, R stays.
		gen.Retire()
		rcancel()
		<-rdone
	}
	finish()
	return nil
}

// generate drives gen until life passes or the Reserver ends (lease lost);
// in the latter case the generator is retired at once.
func (h *decisiveHolder) generate(ctx context.Context, gen *generator.Generator, rdone chan error, life time.Duration) error {
	buf := make([]uint64, 64)
	start := time.Now()
	first := len(h.ids)
	for time.Since(start) < life {
		select {
		case err := <-rdone:
			gen.Retire()
			rdone <- err // leave it for the caller
			if !errors.Is(err, coordinator.ErrLeaseLost) && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("reserver: %w", err)
			}
			return nil
		default:
		}
		if len(h.ids) >= h.o.MaxIDs || len(h.ids)-first >= h.o.LifeIDs {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		n, err := gen.NextBatch(bctx, buf)
		cancel()
		h.ids = append(h.ids, buf[:n]...)
		switch {
		case err == nil, errors.Is(err, generator.ErrReservation), errors.Is(err, generator.ErrAhead):
		case errors.Is(err, generator.ErrRetired):
			return nil
		default:
			return fmt.Errorf("generate: %w", err)
		}
	}
	return nil
}

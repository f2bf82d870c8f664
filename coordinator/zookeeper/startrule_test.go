package zookeeper_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/server/clockpolicy"
)

// policyGen is a generator as the clock policy sees it: a serving state
// and a real generator, no holders.
type policyGen struct {
	st  *clockguard.ServingState
	gen *generator.Generator
	l   generator.Layout
}

func (g *policyGen) Name() string                    { return "g" }
func (g *policyGen) State() *clockguard.ServingState { return g.st }
func (g *policyGen) MaxLead() time.Duration          { return time.Second }
func (g *policyGen) Layout() generator.Layout        { return g.l }
func (g *policyGen) Lead(w time.Time) (time.Duration, bool) {
	return g.gen.Lead(w), true
}
func (g *policyGen) Wake()         {}
func (g *policyGen) WriteNow()     {}
func (g *policyGen) ConfirmClock() { g.gen.ConfirmClock() }

// A node started an hour off its two live peers never serves, on
// ZooKeeper too, whose first peer reading is empty (the first Peers call
// sets the watches; records already there are reported from their next
// write). The clock policy's start rule, one reading beyond the limit
// enough, must act on the first reading that holds a peer: spent on the
// empty one, it let the node serve an hour off for a peer interval.
func TestClockStartRuleOnFirstReadingWithPeers(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	spec := coordtest.Spec("g", 4)
	type peer struct {
		l coordinator.Lease
		n coordinator.NodeInfo
	}
	var peers []peer
	for _, name := range []string{"a", "b"} {
		n := coordtest.Node(name)
		peers = append(peers, peer{acquire(t, cl.Connect(t, sysClock), spec, n), n})
	}
	beatAll := func(k int64) {
		for _, p := range peers {
			w, _ := sysClock.Now()
			if err := p.l.Reserve(ctxT(t, 10*time.Second), 100*k, coordinator.Heartbeat{Node: p.n, Wall: w.Add(-time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	beatAll(1)

	obs := cl.Connect(t, sysClock)
	l, _ := generator.Preset("snowflake")
	g, err := generator.New(generator.Config{Layout: l, Worker: 1, Clock: sysClock, Floor: -1,
		Reserved: generator.NoReservation, MaxLead: time.Second, MaxForwardStep: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pg := &policyGen{st: clockguard.NewServingState("g"), gen: g, l: l}
	pg.st.Ready()
	p := clockpolicy.New(clockpolicy.Config{MaxClockOffset: 250 * time.Millisecond, MaxPeerSkew: time.Second,
		RollbackRecovery: "auto", RefuseUnchecked: true}, sysClock, slog.New(slog.NewTextHandler(io.Discard, nil)), []clockpolicy.Generator{pg})
	p.WaitFirstPeers()

	// As the node's peer loop: a reading at once, then about once a
	// second, while the peers write a heartbeat a second.
	sawPeers := false
	for k := int64(2); k <= 3; k++ {
		beats, err := obs.Peers(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		p.OnPeers("self-instance", beats)
		_, count, skew := p.PeerStatus()
		t.Logf("reading %d: %d beats, %d live nodes, skew %v; serving %v, reason %q", k-1, len(beats), count, skew.Round(time.Millisecond), pg.st.Serving(), pg.st.Reason())
		if pg.st.Serving() {
			t.Fatalf("reading %d: a node an hour off its two live peers serves", k-1)
		}
		sawPeers = sawPeers || count >= 3
		time.Sleep(500 * time.Millisecond)
		beatAll(k)
		time.Sleep(500 * time.Millisecond)
	}
	if !sawPeers {
		t.Fatal("no reading saw the two peers: the test proves nothing")
	}
}

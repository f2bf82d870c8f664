package segment

import (
	"errors"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

func TestClaimFromNext(t *testing.T) {
	d := Definition{Start: 10, Max: 24}
	c := NewCounter(d)
	r, c2, err := c.Claim(d, 10, 0)
	if err != nil || r != (Range{10, 19}) || c2.Next != 20 || c2.Seq != 1 {
		t.Fatalf("first claim: %v %+v %v", r, c2, err)
	}
	if c.Next != 10 || c.Seq != 0 {
		t.Fatalf("Claim changed its receiver: %+v", c)
	}
	// The last claim is cut at Max; the next one is refused.
	r, c3, err := c2.Claim(d, 10, 20)
	if err != nil || r != (Range{20, 24}) || c3.Next != 25 {
		t.Fatalf("claim at max: %v %+v %v", r, c3, err)
	}
	if _, _, err := c3.Claim(d, 1, 25); !errors.Is(err, ErrExhausted) {
		t.Fatalf("claim past max: %v, want ErrExhausted", err)
	}
	if _, _, err := c3.Claim(d, 0, 0); !errors.Is(err, ErrCounter) {
		t.Fatalf("claim of 0: %v", err)
	}
}

func TestClaimAtMaxID(t *testing.T) {
	d := Definition{Start: MaxID - 2, Max: MaxID}
	r, c, err := NewCounter(d).Claim(d, 1<<40, 0)
	if err != nil || r != (Range{MaxID - 2, MaxID}) || c.Next != MaxID+1 {
		t.Fatalf("%v %+v %v", r, c, err)
	}
	if _, _, err := c.Claim(d, 1, 0); !errors.Is(err, ErrExhausted) {
		t.Fatal(err)
	}
}

func TestClaimTakesFreeAboveFirst(t *testing.T) {
	d := Default()
	c := Counter{Next: 1000, Seq: 7, Free: []Range{{100, 199}, {300, 349}}}
	// A node that claimed nothing takes the lowest free range, in part.
	r, c2, err := c.Claim(d, 60, 0)
	if err != nil || r != (Range{100, 159}) || !slices.Equal(c2.Free, []Range{{160, 199}, {300, 349}}) || c2.Seq != 8 || c2.Next != 1000 {
		t.Fatalf("%v %+v %v", r, c2, err)
	}
	// A node whose claims reach 250 skips the free range below it.
	r, c3, err := c2.Claim(d, 500, 250)
	if err != nil || r != (Range{300, 349}) || !slices.Equal(c3.Free, []Range{{160, 199}}) {
		t.Fatalf("%v %+v %v", r, c3, err)
	}
	// Above every free range: from Next.
	r, c4, err := c3.Claim(d, 10, 350)
	if err != nil || r != (Range{1000, 1009}) || c4.Next != 1010 || !slices.Equal(c4.Free, []Range{{160, 199}}) {
		t.Fatalf("%v %+v %v", r, c4, err)
	}
}

func TestHandBack(t *testing.T) {
	c := Counter{Next: 1000, Seq: 3, Free: []Range{{100, 199}}}
	// Touching the free range: merged.
	c2, dropped, err := c.HandBack(Range{200, 299})
	if err != nil || dropped != 0 || !slices.Equal(c2.Free, []Range{{100, 299}}) || c2.Seq != 4 {
		t.Fatalf("%+v %v", c2, err)
	}
	// Ending just below Next: Next comes down, and a free range now
	// touching it too.
	c3, _, err := c2.HandBack(Range{300, 999})
	if err != nil || c3.Next != 100 || len(c3.Free) != 0 {
		t.Fatalf("%+v %v", c3, err)
	}
	for _, bad := range []Range{{150, 160}, {900, 1000}, {1000, 1005}, {5, 4}} {
		if _, _, err := c2.HandBack(bad); !errors.Is(err, ErrCounter) {
			t.Errorf("hand-back %v: %v, want ErrCounter", bad, err)
		}
	}
}

func TestHandBackKeepsAtMostMaxFree(t *testing.T) {
	c := Counter{Next: 1 << 20}
	var dropped uint64
	for i := range MaxFree + 3 {
		var d uint64
		var err error
		// Ranges of growing size with gaps between them.
		c, d, err = c.HandBack(Range{uint64(i) * 1000, uint64(i)*1000 + uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		dropped += d
	}
	if len(c.Free) != MaxFree || dropped != 1+2+3 || c.Skipped != dropped {
		t.Fatalf("%d free ranges, %d dropped, %d skipped", len(c.Free), dropped, c.Skipped)
	}
	if err := c.Validate(Definition{Start: 0, Max: MaxID}); err != nil {
		t.Fatal(err)
	}
}

func TestBump(t *testing.T) {
	d := Definition{Start: 1, Max: 100}
	c := Counter{Next: 50, Seq: 9, Free: []Range{{10, 19}}, Skipped: 5}
	b, dropped := c.Bump(d, 30)
	if b.Next != 80 || b.Seq != 39 || len(b.Free) != 0 || dropped != 10 || b.Skipped != 5+10+30 {
		t.Fatalf("%+v %d", b, dropped)
	}
	b, _ = c.Bump(d, 1000)
	if b.Next != 101 || b.Skipped != 5+10+51 {
		t.Fatalf("bump past max: %+v", b)
	}
}

// TestCheckBump: a bump that would carry Seq past 2^64-1 is refused
// naming the bound (Seq would wrap below every node's memory of the
// counter, and each would find it rolled back); the largest allowed one
// leaves a node's own last write behind it.
func TestCheckBump(t *testing.T) {
	d := Default()
	_, c, _ := NewCounter(d).Claim(d, 10, 0)
	c = c.Stamp(7)
	m := c.Mark()
	if err := c.CheckBump(math.MaxUint64); err == nil || !strings.Contains(err.Error(), "at most 18446744073709551614") {
		t.Fatalf("bump by 2^64-1 at seq 1: %v, want a refusal naming the bound", err)
	}
	if err := c.CheckBump(0); err == nil {
		t.Fatal("bump by 0 accepted")
	}
	if err := c.CheckBump(math.MaxUint64 - 1); err != nil {
		t.Fatalf("bump to seq 2^64-1: %v", err)
	}
	after, _ := c.Bump(d, math.MaxUint64-1)
	after = after.Stamp(9)
	if err := after.Validate(d); err != nil || after.Seq != math.MaxUint64 {
		t.Fatalf("bumped to %+v: %v", after, err)
	}
	if err := after.Follows(m); err != nil {
		t.Fatalf("a node's own mark after the largest bump: %v", err)
	}
}

func TestCounterValidate(t *testing.T) {
	d := Definition{Start: 10, Max: 100}
	good := []Counter{{Next: 10}, {Next: 101}, {Next: 50, Free: []Range{{10, 20}, {22, 49}}}}
	for _, c := range good {
		if err := c.Validate(d); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []Counter{{Next: 9}, {Next: 102}, {Next: 50, Free: []Range{{5, 20}}}, {Next: 50, Free: []Range{{10, 50}}},
		{Next: 50, Free: []Range{{10, 20}, {21, 30}}}, {Next: 50, Free: []Range{{30, 40}, {10, 20}}}, {Next: 50, Free: []Range{{20, 10}}}}
	for _, c := range bad {
		if err := c.Validate(d); !errors.Is(err, ErrCounter) {
			t.Errorf("%+v: %v, want ErrCounter", c, err)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	for _, c := range []Counter{{Next: 1}, {Next: MaxID + 1, Seq: 1 << 62, Free: []Range{{1, 2}, {MaxID - 5, MaxID}}, Hist: []uint64{1, 1<<64 - 1}, Skipped: 7}} {
		got, err := DecodeCounter(c.Encode())
		if err != nil || got.Next != c.Next || got.Seq != c.Seq || !slices.Equal(got.Free, c.Free) || !slices.Equal(got.Hist, c.Hist) || got.Skipped != c.Skipped {
			t.Fatalf("%s: %+v %v", c.Encode(), got, err)
		}
	}
	for _, bad := range []string{``, `{}`, `{"next":"01","seq":"0"}`, `{"next":"1","seq":"-1"}`, `{"next":1,"seq":"0"}`,
		`{"next":"1","seq":"0","extra":1}`, `{"next":"1","seq":"0"} {}`, `{"next":"1","seq":"0","free":[["1"]]}`,
		`{"next":"1","seq":"1","hist":["1"]}`, `{"next":"1","seq":"1","hist":["000000000000000G"]}`, `{"next":"1","seq":"1","hist":["000000000000000A"]}`,
		`{"next":"1","seq":"1","skipped":"0"}`, `{"next":"1","seq":"1","skipped":"-1"}`} {
		if _, err := DecodeCounter([]byte(bad)); !errors.Is(err, ErrCounter) {
			t.Errorf("%s: %v, want ErrCounter", bad, err)
		}
	}
}

// TestFollows: a node's memory of one write recognises a history without
// it — Seq below, or another write at its Seq — while the counter still
// records that Seq, and only Seq beyond HistLen writes or after a bump.
func TestFollows(t *testing.T) {
	d := Default()
	write := func(c Counter, id uint64) Counter {
		_, next, err := c.Claim(d, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		return next.Stamp(id)
	}
	base := write(NewCounter(d), 1)
	mine := write(base, 2) // this node's write, at seq 2
	m := mine.Mark()
	if m != (Mark{Seq: 2, ID: 2, Next: mine.Next}) {
		t.Fatalf("mark %+v", m)
	}
	if err := mine.Follows(m); err != nil {
		t.Fatal(err)
	}
	later := mine
	for i := range 5 {
		later = write(later, uint64(100+i))
	}
	if err := later.Follows(m); err != nil {
		t.Fatalf("writes since: %v", err)
	}
	// The coordinator restored to base: seq 1.
	if err := base.Follows(m); !errors.Is(err, ErrForked) {
		t.Fatalf("seq below: %v", err)
	}
	// Restored to base, then another node wrote at seq 2 and 3: seq
	// caught up, the history did not.
	fork := write(write(base, 7), 8)
	if err := fork.Follows(m); !errors.Is(err, ErrForked) || fork.Seq < m.Seq {
		t.Fatalf("fork: %v", err)
	}
	// Beyond HistLen writes the write at m's seq is gone: only Seq counts.
	far := fork
	for i := range HistLen {
		far = write(far, uint64(1000+i))
	}
	if len(far.Hist) != HistLen || far.Validate(d) != nil {
		t.Fatalf("hist %d, %v", len(far.Hist), far.Validate(d))
	}
	if err := far.Follows(m); err != nil {
		t.Fatalf("beyond HistLen: %v", err)
	}
	// A bump starts the history again.
	bumped, _ := fork.Bump(d, 1000)
	if bumped = bumped.Stamp(9); len(bumped.Hist) != 1 || bumped.Follows(m) != nil {
		t.Fatalf("bump: %+v %v", bumped, bumped.Follows(m))
	}
	// A record with more write IDs than writes, or a zero one, is refused.
	if err := (Counter{Next: 1, Seq: 1, Hist: []uint64{1, 2}}).Validate(d); !errors.Is(err, ErrCounter) {
		t.Fatalf("hist longer than seq: %v", err)
	}
	if err := (Counter{Next: 1, Seq: 1, Hist: []uint64{0}}).Validate(d); !errors.Is(err, ErrCounter) {
		t.Fatalf("zero write ID: %v", err)
	}
}

// TestClaimsNeverOverlap drives random claims and hand-backs of several
// nodes against one counter: no ID is ever claimed twice while held, each
// node's claims increase, and every ID of the definition is exactly one
// of: held by a node, free, at or above Next, or handed out and gone.
func TestClaimsNeverOverlap(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		d := Definition{Start: 1 + uint64(rng.Intn(5)), Max: 2000 + uint64(rng.Intn(500))}
		c := NewCounter(d)
		type node struct {
			held  []Range
			above uint64
		}
		nodes := make([]*node, 3)
		for i := range nodes {
			nodes[i] = &node{}
		}
		owner := map[uint64]int{} // ID → node holding it
		used := map[uint64]bool{} // IDs handed out (consumed)
		for step := 0; step < 400; step++ {
			n := nodes[rng.Intn(len(nodes))]
			switch rng.Intn(4) {
			case 0, 1: // claim
				r, next, err := c.Claim(d, 1+uint64(rng.Intn(40)), n.above)
				if errors.Is(err, ErrExhausted) {
					continue
				}
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if r.First < n.above {
					t.Fatalf("seed %d: claim %v below the node's last %d", seed, r, n.above)
				}
				for id := r.First; id <= r.Last; id++ {
					if _, ok := owner[id]; ok || used[id] {
						t.Fatalf("seed %d: ID %d claimed twice", seed, id)
					}
					owner[id] = 1
				}
				c, n.held, n.above = next, append(n.held, r), r.Last+1
			case 2: // use some IDs of the oldest held range
				if len(n.held) == 0 {
					continue
				}
				r := &n.held[0]
				k := min(uint64(rng.Intn(30)), r.Len())
				for id := r.First; id < r.First+k; id++ {
					delete(owner, id)
					used[id] = true
				}
				if k == r.Len() {
					n.held = n.held[1:]
				} else {
					r.First += k
				}
			case 3: // graceful stop: hand every held range back
				for _, r := range n.held {
					next, dropped, err := c.HandBack(r)
					if err != nil {
						t.Fatalf("seed %d: hand-back %v: %v", seed, r, err)
					}
					if dropped != 0 {
						t.Fatalf("seed %d: dropped %d", seed, dropped)
					}
					for id := r.First; id <= r.Last; id++ {
						delete(owner, id)
					}
					c = next
				}
				n.held, n.above = nil, 0
			}
			if err := c.Validate(d); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			// Accounting: free, held, used and unclaimed IDs partition
			// the definition.
			total := uint64(len(owner)) + uint64(len(used)) + c.FreeLen() + (d.Max + 1 - c.Next)
			if total != d.Size() {
				t.Fatalf("seed %d step %d: held %d + used %d + free %d + unclaimed %d != %d",
					seed, step, len(owner), len(used), c.FreeLen(), d.Max+1-c.Next, d.Size())
			}
		}
	}
}

func FuzzDecodeCounter(f *testing.F) {
	f.Add([]byte(`{"next":"1","seq":"0"}`))
	f.Add(Counter{Next: 500, Seq: 3, Free: []Range{{1, 9}, {20, 40}}}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCounter(b)
		if err != nil {
			if !errors.Is(err, ErrCounter) {
				t.Fatalf("refusal not ErrCounter: %v", err)
			}
			return
		}
		// What decodes encodes back to a record that decodes the same.
		again, err := DecodeCounter(c.Encode())
		if err != nil || again.Next != c.Next || again.Seq != c.Seq || !slices.Equal(again.Free, c.Free) || !slices.Equal(again.Hist, c.Hist) || again.Skipped != c.Skipped {
			t.Fatalf("%s: round trip %+v %v", b, again, err)
		}
	})
}

package intervals

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// check verifies the set's invariants: intervals ascending, disjoint,
// never adjacent, and n their total.
func check(t *testing.T, s *Set) {
	t.Helper()
	var n uint64
	for i, iv := range s.iv {
		if iv.First > iv.Last {
			t.Fatalf("interval %d %v: First above Last", i, iv)
		}
		if i > 0 && s.iv[i-1].Last+1 >= iv.First {
			t.Fatalf("intervals %d %v and %d %v overlap or touch", i-1, s.iv[i-1], i, iv)
		}
		n += iv.Len()
	}
	if n != s.n {
		t.Fatalf("Len %d, intervals hold %d", s.n, n)
	}
}

// oracle is the set as a map from value to times added.
type oracle map[uint64]int

// add returns the values of the run the oracle held before.
func (o oracle) add(first, count uint64) (overlap uint64) {
	for v := first; v-first < count; v++ {
		if o[v] > 0 {
			overlap++
		}
		o[v]++
	}
	return overlap
}

// same checks s against o over [lo, hi], and just outside it.
func same(t *testing.T, s *Set, o oracle, lo, hi uint64) {
	t.Helper()
	check(t, s)
	if s.Len() != uint64(len(o)) {
		t.Fatalf("Len %d, oracle %d", s.Len(), len(o))
	}
	for v := lo; ; v++ {
		if got, want := s.Contains(v), o[v] > 0; got != want {
			t.Fatalf("Contains(%d) = %v, oracle %v; intervals %v", v, got, want, s.iv)
		}
		if v == hi {
			break
		}
	}
	if lo > 0 && s.Contains(lo-1) {
		t.Fatalf("Contains(%d) below every value added", lo-1)
	}
	if hi < math.MaxUint64 && s.Contains(hi+1) {
		t.Fatalf("Contains(%d) above every value added", hi+1)
	}
}

// universes: values near 0, in the middle, and up to MaxUint64 (where
// last+1 wraps).
var universes = []uint64{0, 1 << 40, math.MaxUint64 - 299}

const span = 300

func TestAddRandomAgainstOracle(t *testing.T) {
	for _, base := range universes {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, base))
			var s Set
			o := oracle{}
			for op := range 200 {
				off := rng.Uint64N(span)
				count := min(1+rng.Uint64N(25), span-off)
				if rng.IntN(10) == 0 {
					count = 0
				}
				first := base + off
				want := o.add(first, count)
				if got := s.Add(first, count); got != want {
					t.Fatalf("base %d seed %d op %d: Add(%d, %d) overlap %d, oracle %d", base, seed, op, first, count, got, want)
				}
				same(t, &s, o, base, base+span-1)
			}
		}
	}
}

func TestAddIDsAgainstOracle(t *testing.T) {
	for _, base := range universes {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, base^1))
			var s Set
			o := oracle{}
			for op := range 30 {
				ids := make([]uint64, rng.IntN(40))
				for i := range ids {
					ids[i] = base + rng.Uint64N(span)
				}
				var want uint64
				for _, v := range ids {
					want += o.add(v, 1)
				}
				if got := s.AddIDs(slices.Clone(ids)); got != want {
					t.Fatalf("base %d seed %d op %d: AddIDs(%v) overlap %d, oracle %d", base, seed, op, ids, got, want)
				}
				same(t, &s, o, base, base+span-1)
			}
		}
	}
}

func TestUnionAndOverlapAgainstOracle(t *testing.T) {
	for _, base := range universes {
		for seed := range uint64(30) {
			rng := rand.New(rand.NewPCG(seed, base^2))
			sets := make([]*Set, 1+rng.IntN(5))
			oracles := make([]oracle, len(sets))
			for k := range sets {
				sets[k], oracles[k] = &Set{}, oracle{}
				for range rng.IntN(15) {
					off := rng.Uint64N(span)
					count := min(1+rng.Uint64N(30), span-off)
					sets[k].Add(base+off, count)
					oracles[k].add(base+off, count)
				}
			}
			all := oracle{}
			var want uint64
			for _, o := range oracles {
				for v := range o {
					if all[v] > 0 {
						want++
					}
					all[v]++
				}
			}
			u, got := Union(sets...)
			if got != want {
				t.Fatalf("base %d seed %d: Union overlap %d, oracle %d", base, seed, got, want)
			}
			same(t, u, all, base, base+span-1)
			if len(sets) >= 2 {
				var both uint64
				for v := range oracles[0] {
					if oracles[1][v] > 0 {
						both++
					}
				}
				if got := sets[0].Overlap(sets[1]); got != both {
					t.Fatalf("base %d seed %d: Overlap %d, oracle %d", base, seed, got, both)
				}
				if got := sets[1].Overlap(sets[0]); got != both {
					t.Fatalf("base %d seed %d: Overlap reversed %d, oracle %d", base, seed, got, both)
				}
			}
		}
	}
}

// TestNearlyIncreasing is the load tool's case: blocks of a counter
// handed to callers that record them slightly out of order. Everything
// merges into one interval; one block given twice is found.
func TestNearlyIncreasing(t *testing.T) {
	const block, blocks = 4096, 100_000
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]uint64, blocks)
	for i := range order {
		order[i] = uint64(i)
	}
	for i := range order { // each block moves at most 16 places
		j := min(i+rng.IntN(16), blocks-1)
		order[i], order[j] = order[j], order[i]
	}
	var s Set
	for _, b := range order {
		if got := s.Add(b*block, block); got != 0 {
			t.Fatalf("block %d: overlap %d", b, got)
		}
	}
	check(t, &s)
	if s.NumIntervals() != 1 || s.Len() != block*blocks {
		t.Fatalf("%d intervals, %d values; want 1 interval of %d", s.NumIntervals(), s.Len(), block*blocks)
	}
	if got := s.Add(7*block+100, block); got != block {
		t.Fatalf("a block given twice: overlap %d, want %d", got, block)
	}
}

// TestBillionsInFewIntervals: 2^32 IDs in runs take one interval.
func TestBillionsInFewIntervals(t *testing.T) {
	var s Set
	for first := uint64(0); first < 1<<32; first += 1 << 14 {
		s.Add(first, 1<<14)
	}
	if s.NumIntervals() != 1 || s.Len() != 1<<32 {
		t.Fatalf("%d intervals holding %d values", s.NumIntervals(), s.Len())
	}
}

func TestEdges(t *testing.T) {
	var s Set
	if s.Add(5, 0) != 0 || s.Len() != 0 || s.NumIntervals() != 0 {
		t.Fatal("count 0 added something")
	}
	if s.Add(math.MaxUint64, 1) != 0 || !s.Contains(math.MaxUint64) {
		t.Fatal("MaxUint64 not added")
	}
	if got := s.Add(math.MaxUint64-1, 2); got != 1 {
		t.Fatalf("overlap %d at the top, want 1", got)
	}
	if s.Add(0, 1) != 0 || s.NumIntervals() != 2 {
		t.Fatalf("intervals %v", s.Intervals())
	}
	// Filling the gap makes the whole range: 2^64 values, Len wraps to 0.
	if got := s.AddInterval(Interval{1, math.MaxUint64 - 2}); got != 0 {
		t.Fatalf("overlap %d filling the gap", got)
	}
	if s.NumIntervals() != 1 || s.Len() != 0 || !s.Contains(1<<63) {
		t.Fatalf("whole range: %v, Len %d", s.Intervals(), s.Len())
	}
	if got := s.AddInterval(Interval{10, 19}); got != 10 {
		t.Fatalf("overlap %d in the whole range, want 10", got)
	}
	if Fits(math.MaxUint64, 2) || !Fits(math.MaxUint64, 1) || !Fits(1, math.MaxUint64) || Fits(2, math.MaxUint64) || !Fits(math.MaxUint64, 0) {
		t.Fatal("Fits")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a run past MaxUint64 did not panic")
			}
		}()
		s.Add(math.MaxUint64, 2)
	}()
	s.Reset()
	if s.Len() != 0 || s.NumIntervals() != 0 || s.Contains(3) {
		t.Fatal("Reset left values")
	}
	// Intervals is a copy.
	s.Add(1, 3)
	s.Intervals()[0].Last = 100
	if s.Contains(50) {
		t.Fatal("Intervals shares the set's memory")
	}
	if u, ov := Union(); u.Len() != 0 || ov != 0 {
		t.Fatal("Union of nothing")
	}
}

// TestMergeSpansMany: one run over many intervals merges them all.
func TestMergeSpansMany(t *testing.T) {
	var s Set
	for v := uint64(10); v < 1000; v += 10 {
		s.Add(v, 5)
	}
	if got := s.Add(0, 2000); got != 99*5 {
		t.Fatalf("overlap %d, want %d", got, 99*5)
	}
	check(t, &s)
	if s.NumIntervals() != 1 || s.Len() != 2000 {
		t.Fatalf("%v", s.Intervals())
	}
}

// nearlyOrdered is runs of 4096 from a counter, each moved at most 64
// places: 64 callers' responses arriving in a slightly different order
// from the one they were made in.
func nearlyOrdered(n int) []uint64 {
	rng := rand.New(rand.NewPCG(3, 4))
	firsts := make([]uint64, n)
	for i := range firsts {
		firsts[i] = uint64(i) * 4096
	}
	for i := range firsts {
		j := min(i+rng.IntN(64), n-1)
		firsts[i], firsts[j] = firsts[j], firsts[i]
	}
	return firsts
}

func BenchmarkAdd(b *testing.B) {
	b.Run("in-order", func(b *testing.B) {
		var s Set
		for i := range b.N {
			s.Add(uint64(i)*4096, 4096)
		}
	})
	b.Run("nearly-ordered", func(b *testing.B) {
		firsts := nearlyOrdered(1 << 20)
		var s Set
		b.ResetTimer()
		for i := range b.N {
			if i%len(firsts) == 0 {
				s.Reset()
			}
			s.Add(firsts[i%len(firsts)], 4096)
		}
	})
	b.Run("gaps-nearly-ordered", func(b *testing.B) {
		// Every other run missing (another caller's): intervals do not
		// merge, so the set grows and insertions copy.
		firsts := nearlyOrdered(1 << 20)
		var s Set
		b.ResetTimer()
		for i := range b.N {
			if i%len(firsts) == 0 {
				s.Reset()
			}
			s.Add(2*firsts[i%len(firsts)], 4096)
		}
	})
}

func BenchmarkAddIDs(b *testing.B) {
	ids := make([]uint64, 1000)
	b.SetBytes(8 * int64(len(ids)))
	var s Set
	for i := range b.N {
		for k := range ids {
			ids[k] = uint64(i*len(ids) + len(ids) - 1 - k) // reversed: sorting has work
		}
		s.AddIDs(ids)
	}
}

// BenchmarkUnion: 64 callers' sets of interleaved runs (one interval per
// run each) combined into one.
func BenchmarkUnion(b *testing.B) {
	const callers, runs = 64, 4096
	sets := make([]*Set, callers)
	for c := range sets {
		sets[c] = &Set{}
		for r := range runs {
			sets[c].Add(uint64(r*callers+c)*4096, 4096)
		}
	}
	b.ResetTimer()
	for range b.N {
		if u, ov := Union(sets...); u.NumIntervals() != 1 || ov != 0 {
			b.Fatal("union")
		}
	}
}

// Package intervals owns Set, a set of uint64 values (IDs) held as sorted,
// disjoint closed intervals, adjacent ones merged. Its memory grows with
// the number of gaps between the values it holds, not with the values: the
// billions of IDs that arrive as runs of consecutive IDs in a load test
// take a few intervals, where a sorted slice of them would take gigabytes.
// Adding a run reports how many of its values were already present, which
// is what a duplicate check needs.
//
// Adding is fastest when runs arrive in increasing order (an append, or an
// extension of the last interval); a run slightly out of order costs a
// binary search and a short copy near the end of the slice. Runs in random
// order cost a copy of the intervals after them each: fine for checking,
// not for use as a general ordered map.
//
// A Set is not safe for concurrent use; give each goroutine its own and
// combine them with Union.
package intervals

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// Interval is the closed interval First..Last (First <= Last).
type Interval struct {
	First, Last uint64
}

// Len is the number of values in the interval; it wraps to 0 for the
// whole uint64 range, whose 2^64 values do not fit a uint64.
func (iv Interval) Len() uint64 { return iv.Last - iv.First + 1 }

// Set is a set of uint64 values. The zero Set is empty and ready to use.
type Set struct {
	// iv is sorted, disjoint and never adjacent:
	// iv[i].Last+1 < iv[i+1].First for every i.
	iv []Interval
	n  uint64 // values held (wraps to 0 for the whole range)
}

// Add adds the run of count consecutive values first..first+count-1 and
// returns how many of them the set held already. count 0 adds nothing. A
// run that would pass math.MaxUint64 panics: callers take runs from the
// wire and must check them first (see Fits).
func (s *Set) Add(first, count uint64) (overlap uint64) {
	if count == 0 {
		return 0
	}
	if !Fits(first, count) {
		panic("intervals: run passes MaxUint64")
	}
	return s.AddInterval(Interval{first, first + count - 1})
}

// Fits reports whether the run first..first+count-1 stays within uint64
// (count 0 always fits).
func Fits(first, count uint64) bool { return count == 0 || first <= math.MaxUint64-(count-1) }

// AddInterval adds iv (First <= Last, else it panics) and returns how many
// of its values the set held already.
func (s *Set) AddInterval(iv Interval) (overlap uint64) {
	lo, hi := iv.First, iv.Last
	if lo > hi {
		panic("intervals: interval's First above its Last")
	}
	n := len(s.iv)
	// Fast path: at or after the end, as runs from one caller arrive.
	if n == 0 || lo > s.iv[n-1].Last {
		s.n += iv.Len()
		if n > 0 && lo == s.iv[n-1].Last+1 {
			s.iv[n-1].Last = hi
			return 0
		}
		s.iv = append(s.iv, iv)
		return 0
	}
	// i: the first interval that overlaps or touches lo; j: the first
	// that lies wholly above hi and does not touch it. Those in [i, j)
	// merge with iv.
	i := sort.Search(n, func(k int) bool { return lo == 0 || s.iv[k].Last >= lo-1 })
	j := n
	if hi != math.MaxUint64 {
		j = i + sort.Search(n-i, func(k int) bool { return s.iv[i+k].First > hi+1 })
	}
	if i == j { // touches nothing: insert
		s.iv = slices.Insert(s.iv, i, iv)
		s.n += iv.Len()
		return 0
	}
	merged := Interval{min(lo, s.iv[i].First), max(hi, s.iv[j-1].Last)}
	var held uint64 // values of the merged intervals, all inside merged
	for _, o := range s.iv[i:j] {
		held += o.Len()
		if a, b := max(o.First, lo), min(o.Last, hi); a <= b {
			overlap += b - a + 1
		}
	}
	s.n += merged.Len() - held
	s.iv[i] = merged
	s.iv = slices.Delete(s.iv, i+1, j)
	return overlap
}

// AddIDs adds a list of values in any order, sorting ids in place, and
// returns how many were present already: in the set, or earlier in the
// list (a value listed three times counts 2).
func (s *Set) AddIDs(ids []uint64) (overlap uint64) {
	slices.Sort(ids)
	for i := 0; i < len(ids); {
		first, last := ids[i], ids[i]
		j := i + 1
	run:
		for ; j < len(ids); j++ {
			switch v := ids[j]; {
			case v == last:
				overlap++
			case v == last+1: // sorted, so last+1 cannot have wrapped to 0 here
				last = v
			default:
				break run
			}
		}
		overlap += s.AddInterval(Interval{first, last})
		i = j
	}
	return overlap
}

// Contains reports whether v is in the set.
func (s *Set) Contains(v uint64) bool {
	i := sort.Search(len(s.iv), func(k int) bool { return s.iv[k].Last >= v })
	return i < len(s.iv) && s.iv[i].First <= v
}

// Len is the number of values held (it wraps to 0 if the set holds the
// whole uint64 range).
func (s *Set) Len() uint64 { return s.n }

// NumIntervals is the number of disjoint intervals held: the set's size
// in memory is 16 bytes each.
func (s *Set) NumIntervals() int { return len(s.iv) }

// Intervals returns a copy of the set's intervals, ascending, disjoint and
// never adjacent.
func (s *Set) Intervals() []Interval { return slices.Clone(s.iv) }

// Grow makes room for n more intervals without reallocating, so a caller
// can keep allocation out of a measured loop.
func (s *Set) Grow(n int) { s.iv = slices.Grow(s.iv, n) }

// Reset empties the set, keeping its memory.
func (s *Set) Reset() { s.iv, s.n = s.iv[:0], 0 }

// Overlap counts the values held by both s and o.
func (s *Set) Overlap(o *Set) uint64 {
	var n uint64
	a, b := s.iv, o.iv
	for i, j := 0, 0; i < len(a) && j < len(b); {
		if lo, hi := max(a[i].First, b[j].First), min(a[i].Last, b[j].Last); lo <= hi {
			n += hi - lo + 1
		}
		if a[i].Last < b[j].Last {
			i++
		} else {
			j++
		}
	}
	return n
}

// Union returns a new set holding the values of all the sets, and how
// many of their values were held by more than one (a value in three of the
// sets counts 2): the duplicates between sets that each check their own.
func Union(sets ...*Set) (u *Set, overlap uint64) {
	total := 0
	for _, s := range sets {
		total += len(s.iv)
	}
	all := make([]Interval, 0, total)
	for _, s := range sets {
		all = append(all, s.iv...)
	}
	// Each set is sorted already; pdqsort finds such runs cheaply.
	slices.SortFunc(all, func(a, b Interval) int { return cmp.Compare(a.First, b.First) })
	u = &Set{}
	out := all[:0] // compacts in place: out never overtakes the reading
	for _, iv := range all {
		if k := len(out) - 1; k >= 0 {
			last := &out[k]
			if iv.First <= last.Last {
				// Every earlier interval starts at or below iv.First and
				// last.Last is the highest value they reach.
				overlap += min(iv.Last, last.Last) - iv.First + 1
				last.Last = max(last.Last, iv.Last)
				continue
			}
			if iv.First == last.Last+1 {
				last.Last = iv.Last
				continue
			}
		}
		out = append(out, iv)
	}
	for _, iv := range out {
		u.n += iv.Len()
	}
	u.iv = slices.Clip(out)
	return u, overlap
}

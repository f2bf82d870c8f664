package sim

import (
	"fmt"
	"testing"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
)

// TestPieces: the IDs of a call, cut into pieces, are every ID once, each
// piece one worker's consecutive sequence numbers in one unit — in both
// orders, with a wide node's workers interleaved.
func TestPieces(t *testing.T) {
	for _, name := range []string{"snowflake", "sonyflake"} {
		l, _ := generator.Preset(name)
		s := newIDShape(l)
		// Two units of three workers, in per-node order: each unit's
		// blocks in worker order (NodeSeq), or ID by ID (SeqNode).
		var ids []uint64
		for u := int64(100); u < 102; u++ {
			if l.Order == generator.SeqNode {
				for seq := uint64(0); seq <= l.MaxSequence(); seq++ {
					for _, wk := range []uint64{3, 4, 9} {
						ids = append(ids, must(l.Encode(u, 0, wk, seq)))
					}
				}
				continue
			}
			for _, wk := range []uint64{3, 4, 9} {
				for seq := uint64(0); seq <= l.MaxSequence(); seq++ {
					ids = append(ids, must(l.Encode(u, 0, wk, seq)))
				}
			}
		}
		var c piecer
		check := func(how string, ps []piece) {
			t.Helper()
			seen := map[uint64]bool{}
			for _, p := range ps {
				first, err := l.Decode(p.first)
				if err != nil {
					t.Fatal(err)
				}
				for i := uint64(0); i < p.n; i++ {
					id := p.first + i<<s.seqPos
					q, _ := l.Decode(id)
					if q.Worker != first.Worker || q.Units != first.Units || q.Sequence != first.Sequence+i {
						t.Fatalf("%s %s: piece %+v holds %d (%+v), not the next of %+v", name, how, p, id, q, first)
					}
					if seen[id] {
						t.Fatalf("%s %s: %d in two pieces", name, how, id)
					}
					seen[id] = true
				}
			}
			if len(seen) != len(ids) {
				t.Fatalf("%s %s: %d IDs in pieces, want %d", name, how, len(seen), len(ids))
			}
			if want := 6; len(ps) != want {
				t.Errorf("%s %s: %d pieces, want %d (one per worker and unit)", name, how, len(ps), want)
			}
		}
		check("ids", s.idPieces(&c, nil, ids))
		var runs []generator.Run
		for _, id := range ids {
			if k := len(runs); k > 0 && runs[k-1].First+runs[k-1].Count == id {
				runs[k-1].Count++
				continue
			}
			runs = append(runs, generator.Run{First: id, Count: 1})
		}
		check("runs", s.runPieces(&c, nil, runs))
	}
}

func must(id uint64, err error) uint64 {
	if err != nil {
		panic(err)
	}
	return id
}

// TestInsertRun: runs of one caller that meet merge; an overlap is found
// whichever side it comes from, and not recorded.
func TestInsertRun(t *testing.T) {
	w := &world{issued: map[coordinator.Slot][]keyRun{}}
	slot := coordinator.Slot{Worker: 1}
	for _, r := range []keyRun{{10, 19, "a"}, {30, 39, "a"}, {20, 29, "a"}, {40, 49, "b"}, {0, 9, "b"}} {
		if prev, dup := w.insertRun(slot, r); dup {
			t.Fatalf("%+v: overlaps %+v", r, prev)
		}
	}
	if got, want := fmt.Sprint(w.issued[slot]), "[{0 9 b} {10 39 a} {40 49 b}]"; got != want {
		t.Fatalf("runs %s, want %s", got, want)
	}
	for _, r := range []keyRun{{5, 5, "c"}, {39, 40, "c"}, {49, 60, "c"}, {0, 100, "c"}} {
		if _, dup := w.insertRun(slot, r); !dup {
			t.Fatalf("%+v: no overlap found", r)
		}
	}
	if _, dup := w.insertRun(slot, keyRun{50, 60, "c"}); dup {
		t.Fatal("50..60 overlaps nothing")
	}
}

package sim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
)

// The IDs received, kept per worker as runs in the worker's own sequence
// order: key = time << sequence bits | sequence. One worker's IDs of
// consecutive units then meet as consecutive keys whatever the layout's
// order (in a layout whose sequence lies above the node fields, sonyflake,
// one worker's IDs are not consecutive integers), so a caller's range of a
// second of IDs costs one entry per worker, not one per unit or per ID.

// piece is n IDs of one worker in one unit: first, first+step, …, where
// step is 1 << the sequence field's position (1 when the sequence is at
// the bottom).
type piece struct{ first, n uint64 }

// idShape is what the checks need of the layout to cut IDs into pieces.
type idShape struct {
	layout   generator.Layout
	seqPos   uint   // position of the sequence field
	seqBits  uint   // its width
	seqMask  uint64 // its largest value
	nodeMask uint64 // the node fields (datacenter, worker) in place
}

func newIDShape(l generator.Layout) idShape {
	s := idShape{layout: l, seqBits: uint(l.SequenceBits), seqMask: l.MaxSequence()}
	nodeBits := uint(l.DatacenterBits) + uint(l.WorkerBits)
	if l.Order == generator.SeqNode {
		s.seqPos = nodeBits
		s.nodeMask = 1<<nodeBits - 1
	} else {
		s.nodeMask = (1<<nodeBits - 1) << s.seqBits
	}
	return s
}

func (s idShape) seq(id uint64) uint64 { return id >> s.seqPos & s.seqMask }

// piecer cuts IDs, in the order a call returned them, into pieces: it
// keeps a piece open per worker (a wide node's IDs of one unit alternate
// between its workers ID by ID in a layout whose sequence lies above the
// node fields) and extends it while the worker's next ID follows.
type piecer struct {
	s    idShape
	open []openPiece
	out  []piece
}

type openPiece struct {
	node, last uint64
	p          piece
}

func (c *piecer) add(id uint64) {
	node := id & c.s.nodeMask
	for k := range c.open {
		o := &c.open[k]
		if o.node != node {
			continue
		}
		if id == o.last+1<<c.s.seqPos && c.s.seq(o.last) != c.s.seqMask {
			o.last = id
			o.p.n++
			return
		}
		c.out = append(c.out, o.p)
		*o = openPiece{node: node, last: id, p: piece{id, 1}}
		return
	}
	if len(c.open) == 8 {
		c.out = append(c.out, c.open[0].p)
		c.open = append(c.open[:0], c.open[1:]...)
	}
	c.open = append(c.open, openPiece{node: node, last: id, p: piece{id, 1}})
}

// pieces returns the pieces cut since the last call, into dst.
func (c *piecer) pieces(dst []piece) []piece {
	for _, o := range c.open {
		c.out = append(c.out, o.p)
	}
	c.open = c.open[:0]
	dst = append(dst, c.out...)
	c.out = c.out[:0]
	return dst
}

// idPieces appends the pieces of the IDs of one call.
func (s idShape) idPieces(c *piecer, dst []piece, ids []uint64) []piece {
	c.s = s
	if s.seqPos == 0 {
		// One worker's IDs of one unit are consecutive integers: a
		// piece ends where they stop being.
		for i := 0; i < len(ids); {
			j := i + 1
			for j < len(ids) && ids[j] == ids[j-1]+1 && ids[j-1]&s.seqMask != s.seqMask {
				j++
			}
			c.out = append(c.out, piece{ids[i], uint64(j - i)})
			i = j
		}
		return c.pieces(dst)
	}
	for _, id := range ids {
		c.add(id)
	}
	return c.pieces(dst)
}

// runPieces appends the pieces of the runs of consecutive IDs of one call
// (NextRange): in a layout whose sequence is at the bottom a run may hold
// several workers' blocks (adjacent workers' blocks meet); in the other
// order consecutive integers are different workers' IDs.
func (s idShape) runPieces(c *piecer, dst []piece, runs []generator.Run) []piece {
	c.s = s
	for _, r := range runs {
		if r.Count == 0 {
			continue
		}
		if s.seqPos != 0 {
			for i := uint64(0); i < r.Count; i++ {
				c.add(r.First + i)
			}
			continue
		}
		for x, last := r.First, r.First+r.Count-1; ; {
			end := min(last, x|s.seqMask) // the end of x's block
			c.out = append(c.out, piece{x, end - x + 1})
			if end == last {
				break
			}
			x = end + 1
		}
	}
	return c.pieces(dst)
}

// keyRun is a run of one worker's keys handed to one caller.
type keyRun struct {
	first, last uint64
	who         string
}

// key is an ID's place in its worker's sequence order.
func (s idShape) key(p generator.Parts) uint64 { return uint64(p.Units)<<s.seqBits | p.Sequence }

// idOf is the ID of a worker's key.
func (s idShape) idOf(slot coordinator.Slot, key uint64) uint64 {
	id, err := s.layout.Encode(int64(key>>s.seqBits), slot.Datacenter, slot.Worker, key&s.seqMask)
	if err != nil {
		return 0
	}
	return id
}

// insertRun records r among its worker's runs, kept sorted and merged
// with a neighbour of the same caller it meets; it reports a run r
// overlaps, if any (then r is not recorded).
func (w *world) insertRun(slot coordinator.Slot, r keyRun) (keyRun, bool) {
	runs, prev, dup := insertKeyRun(w.issued[slot], r)
	w.issued[slot] = runs
	return prev, dup
}

// insertKeyRun records r in runs (sorted, disjoint), merged with a
// neighbour of the same caller it meets; it returns the runs and a run r
// overlaps, if any (then r is not recorded).
func insertKeyRun(runs []keyRun, r keyRun) ([]keyRun, keyRun, bool) {
	i := sort.Search(len(runs), func(i int) bool { return runs[i].first > r.last })
	// runs[:i] start at or below r.last: only runs[i-1] may reach r.
	if i > 0 && runs[i-1].last >= r.first {
		return runs, runs[i-1], true
	}
	joinsPrev := i > 0 && runs[i-1].last+1 == r.first && runs[i-1].who == r.who
	joinsNext := i < len(runs) && r.last+1 == runs[i].first && runs[i].who == r.who
	switch {
	case joinsPrev && joinsNext:
		runs[i-1].last = runs[i].last
		runs = append(runs[:i], runs[i+1:]...)
	case joinsPrev:
		runs[i-1].last = r.last
	case joinsNext:
		runs[i].first = r.first
	default:
		runs = append(runs, keyRun{})
		copy(runs[i+1:], runs[i:])
		runs[i] = r
	}
	return runs, keyRun{}, false
}

// received checks and records one call's IDs, as pieces: unique, and
// within the reservation the coordinator holds for their worker (unless a
// restore began since epoch, w.restores when the call began, or less
// than 5 s ago), each within the interval of the holder that issued it.
func (w *world) received(who string, pieces []piece, epoch int) {
	node, _, _ := strings.Cut(who, "/")
	w.mu.Lock()
	defer w.mu.Unlock()
	restored := w.restoredSinceLocked(epoch)
	type top struct {
		units int64
		id    uint64
	}
	var tops map[coordinator.Slot]top
	step := uint64(1) << w.shape.seqPos
	for _, pc := range pieces {
		w.ids += int(pc.n)
		last := pc.first + (pc.n-1)*step
		p, err := w.layout.Decode(last)
		if err != nil {
			w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d does not decode: %v", w.since(), who, last, err))
			continue
		}
		slot := coordinator.Slot{Datacenter: p.Datacenter, Worker: p.Worker}
		w.checkHolderLocked(node, who, slot, p.Units, last)
		k := w.shape.key(p)
		r := keyRun{first: k - (pc.n - 1), last: k, who: who}
		if prev, dup := w.insertRun(slot, r); dup {
			w.violations = append(w.violations, fmt.Sprintf("%9v  IDs %d..%d of %s issued twice: to %s and again to %s",
				w.since(), w.shape.idOf(slot, max(r.first, prev.first)), w.shape.idOf(slot, min(r.last, prev.last)),
				slot, prev.who, who))
			continue
		}
		if restored {
			continue
		}
		if tops == nil {
			tops = map[coordinator.Slot]top{}
		}
		if t, ok := tops[slot]; !ok || p.Units > t.units {
			tops[slot] = top{p.Units, last}
		}
	}
	for slot, t := range tops {
		if r := w.store.Reserved(generatorName, slot); t.units > r {
			w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d has time %d above its worker's reservation %d (%s)", w.since(), who, t.id, t.units, r, slot))
		}
	}
}

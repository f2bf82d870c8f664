package segment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Range is the IDs First..Last, both included (First <= Last).
type Range struct {
	First uint64
	Last  uint64
}

// Len is the number of IDs in r.
func (r Range) Len() uint64 { return r.Last - r.First + 1 }

func (r Range) String() string { return fmt.Sprintf("[%d, %d]", r.First, r.Last) }

// Counter is a segment generator's shared state, as the coordinator stores
// it under the generator: what no claim has taken yet. Every write of it is
// a compare-and-swap from the state read (the coordinator's fence), and
// every write raises Seq, which therefore never goes down: a node that
// reads a Seq below one it saw acknowledged has found the coordinator
// restored from an older snapshot (or written behind its back).
type Counter struct {
	// Next is the lowest ID no claim has taken from the counter; Max+1
	// once the definition is used up.
	Next uint64
	// Seq counts the writes of this state (claims, hand-backs, bumps).
	Seq uint64
	// Free are the remainders handed back by nodes that stopped
	// gracefully, all below Next, in increasing order, disjoint. A claim
	// takes them before Next.
	Free []Range
	// Hist are the write IDs of the last writes, oldest first, at most
	// HistLen: Hist[len(Hist)-1] is the ID of the write that made Seq,
	// the one before it of Seq-1, and so on. Every write draws a random
	// write ID (Stamp), so that a node remembering one write (a Mark)
	// recognises a history that forked from its own — a restored
	// snapshot written on since — even where Seq caught up again.
	Hist []uint64
	// Skipped counts the IDs below Next known lost, cluster-wide: those a
	// hand-back could not keep (MaxFree), those a bump jumped over or
	// dropped, and what a node held unused when it stopped without
	// handing back, as its next start from the same data dir reports it
	// (at most what it held at its last claim: an upper bound).
	Skipped uint64
	// Sec are a sequence generator's persisted maxima, one per section
	// (Definition.Sections of them; none for a segment generator): no
	// value above Sec[s] was handed out for a key of section s, and a
	// section's new owner starts every key of it above Sec[s]. A write
	// only raises them (Raise), except a bump, which raises all.
	Sec []uint64
}

// HistLen is how many write IDs a counter keeps: a node that remembers a
// write recognises a forked history while fewer writes than this came
// since (at a few writes per second per node, many seconds of them).
const HistLen = 128

// Mark is what a node remembers of a counter it saw: the Seq of the
// record, the write ID that made it (0: the record carried none) and its
// Next.
type Mark struct {
	Seq  uint64 `json:"seq"`
	ID   uint64 `json:"id"`
	Next uint64 `json:"next"`
}

// Mark is the Mark of c.
func (c Counter) Mark() Mark {
	m := Mark{Seq: c.Seq, Next: c.Next}
	if k := len(c.Hist); k > 0 {
		m.ID = c.Hist[k-1]
	}
	return m
}

// Stamp is c with the write ID id (nonzero) recorded as the write that made
// its Seq: every state written in place of another is stamped once, after
// Claim, HandBack or Bump.
func (c Counter) Stamp(id uint64) Counter {
	c.Hist = append(slices.Clone(c.Hist), id)
	if k := len(c.Hist); k > HistLen {
		c.Hist = c.Hist[k-HistLen:]
	}
	return c
}

// WriteAt is the write ID of the write that made seq, when c still
// records it.
func (c Counter) WriteAt(seq uint64) (uint64, bool) {
	if seq > c.Seq || c.Seq-seq >= uint64(len(c.Hist)) {
		return 0, false
	}
	return c.Hist[uint64(len(c.Hist))-1-(c.Seq-seq)], true
}

// Holds reports whether c still records m's write at m's seq: a claim's
// or a take's own write, which settles it and lets it be handed back.
func (c Counter) Holds(m Mark) bool {
	id, ok := c.WriteAt(m.Seq)
	return ok && id == m.ID
}

// ErrForked marks a counter whose history does not contain a write a node
// remembers: its Seq is below the remembered one, or the write recorded at
// the remembered Seq is another. Either way the coordinator lost writes
// (a restore from an older snapshot, or a write behind the node's back).
var ErrForked = errors.New("segment: counter history does not contain a write this node saw")

// Follows checks that c continues the history in which m was written: an
// error matching ErrForked when c.Seq is below m.Seq, or when c still
// records the write at m.Seq and it is not m's. Where more than HistLen
// writes came since m (or m carries no write ID), only Seq is compared.
func (c Counter) Follows(m Mark) error {
	if c.Seq < m.Seq {
		return fmt.Errorf("%w: seq %d is below %d", ErrForked, c.Seq, m.Seq)
	}
	back := c.Seq - m.Seq
	if m.ID == 0 || back >= uint64(len(c.Hist)) {
		return nil
	}
	if got := c.Hist[uint64(len(c.Hist))-1-back]; got != m.ID {
		return fmt.Errorf("%w: the write at seq %d is %016x, this node saw %016x", ErrForked, m.Seq, got, m.ID)
	}
	return nil
}

// NewCounter is the state of a definition no claim has touched.
func NewCounter(d Definition) Counter {
	c := Counter{Next: d.Start}
	if d.IsSeq() {
		c.Sec = make([]uint64, d.Sections)
	}
	return c
}

// Raise is the state with each section s of raise given a maximum of at
// least raise[s] (a sequence generator's write ahead), and whether any
// rose (Seq then counts the write). A maximum is never lowered.
func (c Counter) Raise(raise map[int]uint64) (Counter, bool) {
	next := c.clone()
	rose := false
	for s, v := range raise {
		if s >= 0 && s < len(next.Sec) && v > next.Sec[s] {
			next.Sec[s] = min(v, MaxID)
			rose = true
		}
	}
	if rose {
		next.Seq++
	}
	return next, rose
}

// ErrExhausted marks a claim refused because the definition's IDs are
// used up (every ID up to Max claimed).
var ErrExhausted = errors.New("segment: IDs exhausted")

// ErrCounter marks a stored counter that does not decode, or that breaks
// its own rules (a free range at or above Next, overlapping another, out
// of its definition).
var ErrCounter = errors.New("segment: invalid counter")

// Claim takes up to n IDs (n >= 1) for a node whose claims so far all lie
// below above (0 for a node that claimed nothing): the lowest free range
// that starts at or above above (whole, or its first n IDs), else n IDs
// from Next, fewer when Max is nearer. IDs a node hands out therefore
// increase from claim to claim. It returns the range and the state to
// write in place of c (c itself is unchanged); ErrExhausted when nothing
// is left.
func (c Counter) Claim(d Definition, n uint64, above uint64) (Range, Counter, error) {
	if n == 0 {
		return Range{}, c, fmt.Errorf("%w: a claim of 0 IDs", ErrCounter)
	}
	next := c.clone()
	next.Seq++
	for i, f := range c.Free {
		if f.First < above {
			continue
		}
		r := Range{First: f.First, Last: f.Last}
		if f.Len() > n {
			r.Last = f.First + n - 1
			next.Free[i].First = r.Last + 1
		} else {
			next.Free = slices.Delete(next.Free, i, i+1)
		}
		return r, next, nil
	}
	if c.Next > d.Max || c.Next < d.Start {
		return Range{}, c, fmt.Errorf("%w: every ID up to max=%d is claimed", ErrExhausted, d.Max)
	}
	r := Range{First: c.Next, Last: d.Max}
	if r.Len() > n { // Len of [Start, MaxID] never overflows: MaxID < 2^63
		r.Last = c.Next + n - 1
	}
	next.Next = r.Last + 1
	return r, next, nil
}

// HandBack returns r, the unused remainder of a claim, to the free list,
// and the state to write in place of c. A range that is not below Next,
// or that overlaps a free range, is refused (ErrCounter): it was never
// claimed from this state, and giving it out again could issue an ID
// twice. A remainder that ends just below Next lowers Next instead, so
// that the counter stays dense. Beyond MaxFree ranges the smallest is
// dropped: dropped is how many IDs that loses (the caller counts them as
// skipped).
func (c Counter) HandBack(r Range) (next Counter, dropped uint64, err error) {
	if r.First > r.Last || r.Last >= c.Next {
		return c, 0, fmt.Errorf("%w: hand-back %v is not below the counter's next %d", ErrCounter, r, c.Next)
	}
	for _, f := range c.Free {
		if r.First <= f.Last && f.First <= r.Last {
			return c, 0, fmt.Errorf("%w: hand-back %v overlaps the free range %v", ErrCounter, r, f)
		}
	}
	next = c.clone()
	next.Seq++
	if r.Last+1 == c.Next {
		next.Next = r.First
		// A free range that now ends just below Next joins it too.
		if k := len(next.Free); k > 0 && next.Free[k-1].Last+1 == next.Next {
			next.Next = next.Free[k-1].First
			next.Free = next.Free[:k-1]
		}
		return next, 0, nil
	}
	i, _ := slices.BinarySearchFunc(next.Free, r.First, func(f Range, v uint64) int {
		switch {
		case f.First < v:
			return -1
		case f.First > v:
			return 1
		}
		return 0
	})
	next.Free = merge(slices.Insert(next.Free, i, r))
	for len(next.Free) > MaxFree {
		k := 0
		for j, f := range next.Free {
			if f.Len() < next.Free[k].Len() {
				k = j
			}
		}
		dropped += next.Free[k].Len()
		next.Free = slices.Delete(next.Free, k, k+1)
	}
	next.Skipped += dropped
	return next, dropped, nil
}

// FreeLen is the number of IDs in the free ranges.
func (c Counter) FreeLen() uint64 {
	var n uint64
	for _, f := range c.Free {
		n += f.Len()
	}
	return n
}

// CheckBump refuses a bump of c by by that Bump cannot make: by 0, or
// one that would carry Seq past 2^64-1 (it would wrap below the seq every
// node remembers, and each would find the counter rolled back).
func (c Counter) CheckBump(by uint64) error {
	switch {
	case by == 0:
		return fmt.Errorf("a bump by 0 IDs (at least 1)")
	case by > math.MaxUint64-c.Seq:
		return fmt.Errorf("a bump by %d IDs would carry the counter's seq %d past %d (at most %d)",
			by, c.Seq, uint64(math.MaxUint64), uint64(math.MaxUint64)-c.Seq)
	}
	return nil
}

// Bump is the state after an operator's bump by by IDs (by >= 1), which
// clears a restore: Next is raised by by (to at most Max+1) and Seq by by,
// so that every Seq a node saw acknowledged before the restore lies below
// the new one when by covers the writes the snapshot missed; the free
// ranges are dropped (a restored free range may have been claimed after
// the snapshot), and so is Hist (stamp the result). The IDs jumped over
// and dropped count as skipped. It returns the number of free IDs
// dropped. The caller checks by first (CheckBump).
func (c Counter) Bump(d Definition, by uint64) (Counter, uint64) {
	dropped := c.FreeLen()
	next := Counter{Next: c.Next, Seq: c.Seq + by} // Hist starts again: Seq jumped
	if d.IsSeq() {
		// Every section's maximum rises by by: each section's next owner
		// starts above anything handed out before the restore when by
		// covers what the snapshot missed.
		next.Sec = make([]uint64, len(c.Sec))
		for i, v := range c.Sec {
			next.Sec[i] = v + min(by, MaxID-min(v, MaxID))
		}
		return next, 0
	}
	if room := d.Max + 1 - min(c.Next, d.Max+1); by > room {
		next.Next = d.Max + 1
	} else {
		next.Next += by
	}
	next.Skipped = c.Skipped + dropped + (next.Next - c.Next)
	return next, dropped
}

// Validate refuses a counter that breaks its rules for d: Next outside
// [Start, Max+1], a free range outside [Start, Next), out of order or
// touching another.
func (c Counter) Validate(d Definition) error {
	switch {
	case d.IsSeq() && len(c.Sec) != d.Sections:
		return fmt.Errorf("%w: %d section maxima for %d sections", ErrCounter, len(c.Sec), d.Sections)
	case d.IsSeq() && len(c.Free) > 0:
		return fmt.Errorf("%w: a sequence generator's counter has free ranges", ErrCounter)
	case !d.IsSeq() && len(c.Sec) > 0:
		return fmt.Errorf("%w: a segment generator's counter has %d section maxima", ErrCounter, len(c.Sec))
	}
	for i, v := range c.Sec {
		if v > MaxID {
			return fmt.Errorf("%w: section %d maximum %d above %d", ErrCounter, i, v, MaxID)
		}
	}
	if c.Next < d.Start || c.Next > d.Max+1 {
		return fmt.Errorf("%w: next %d outside [%d, %d]", ErrCounter, c.Next, d.Start, d.Max+1)
	}
	for i, f := range c.Free {
		switch {
		case f.First > f.Last:
			return fmt.Errorf("%w: free range %v is empty", ErrCounter, f)
		case f.First < d.Start || f.Last >= c.Next:
			return fmt.Errorf("%w: free range %v outside [%d, %d)", ErrCounter, f, d.Start, c.Next)
		case i > 0 && f.First <= c.Free[i-1].Last+1:
			return fmt.Errorf("%w: free range %v not after %v", ErrCounter, f, c.Free[i-1])
		}
	}
	if len(c.Hist) > HistLen || uint64(len(c.Hist)) > c.Seq {
		return fmt.Errorf("%w: %d write IDs for seq %d (at most %d)", ErrCounter, len(c.Hist), c.Seq, HistLen)
	}
	if slices.Contains(c.Hist, 0) {
		return fmt.Errorf("%w: a write ID of 0", ErrCounter)
	}
	return nil
}

// MaxFree is the most free ranges a counter keeps: a hand-back that would
// make more drops the smallest (counted as skipped by the caller), so the
// stored state stays small.
const MaxFree = 64

// counterJSON is the stored form: numbers as decimal strings, exact in any
// JSON reader.
type counterJSON struct {
	Next string      `json:"next"`
	Seq  string      `json:"seq"`
	Free [][2]string `json:"free,omitempty"`
	Hist []string    `json:"hist,omitempty"` // 16 hex digits each
	Skip string      `json:"skipped,omitempty"`
	Sec  []string    `json:"sec,omitempty"`
}

// Encode is the stored form of c (JSON, numbers as decimal strings).
func (c Counter) Encode() []byte {
	j := counterJSON{Next: strconv.FormatUint(c.Next, 10), Seq: strconv.FormatUint(c.Seq, 10)}
	for _, f := range c.Free {
		j.Free = append(j.Free, [2]string{strconv.FormatUint(f.First, 10), strconv.FormatUint(f.Last, 10)})
	}
	for _, h := range c.Hist {
		j.Hist = append(j.Hist, fmt.Sprintf("%016x", h))
	}
	if c.Skipped > 0 {
		j.Skip = strconv.FormatUint(c.Skipped, 10)
	}
	for _, v := range c.Sec {
		j.Sec = append(j.Sec, strconv.FormatUint(v, 10))
	}
	b, _ := json.Marshal(j)
	return b
}

// DecodeCounter parses a stored counter; anything not in Encode's form
// (numbers not canonical decimals, unknown fields) is refused with
// ErrCounter. It does not Validate.
func DecodeCounter(b []byte) (Counter, error) {
	var j counterJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Counter{}, fmt.Errorf("%w: %v", ErrCounter, err)
	}
	if dec.More() {
		return Counter{}, fmt.Errorf("%w: data after the record", ErrCounter)
	}
	var c Counter
	var err error
	if c.Next, err = canonical("next", j.Next); err != nil {
		return Counter{}, err
	}
	if c.Seq, err = canonical("seq", j.Seq); err != nil {
		return Counter{}, err
	}
	for _, f := range j.Free {
		var r Range
		if r.First, err = canonical("free", f[0]); err != nil {
			return Counter{}, err
		}
		if r.Last, err = canonical("free", f[1]); err != nil {
			return Counter{}, err
		}
		c.Free = append(c.Free, r)
	}
	if j.Skip != "" {
		if c.Skipped, err = canonical("skipped", j.Skip); err != nil || c.Skipped == 0 {
			return Counter{}, fmt.Errorf("%w: skipped %q is not a canonical positive decimal", ErrCounter, j.Skip)
		}
	}
	for _, v := range j.Sec {
		n, err := canonical("sec", v)
		if err != nil {
			return Counter{}, err
		}
		c.Sec = append(c.Sec, n)
	}
	for _, h := range j.Hist {
		v, err := strconv.ParseUint(h, 16, 64)
		if err != nil || len(h) != 16 || fmt.Sprintf("%016x", v) != h {
			return Counter{}, fmt.Errorf("%w: hist %q is not 16 lower-case hex digits", ErrCounter, h)
		}
		c.Hist = append(c.Hist, v)
	}
	return c, nil
}

// canonical parses a decimal uint64 written without sign, leading zeros
// or spaces.
func canonical(field, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(v, 10) != s {
		return 0, fmt.Errorf("%w: %s %q is not a canonical decimal", ErrCounter, field, s)
	}
	return v, nil
}

func (c Counter) clone() Counter {
	c.Free = slices.Clone(c.Free)
	c.Hist = slices.Clone(c.Hist)
	c.Sec = slices.Clone(c.Sec)
	return c
}

// merge joins free ranges that touch (the list is sorted and disjoint).
func merge(fs []Range) []Range {
	out := fs[:0]
	for _, f := range fs {
		if k := len(out); k > 0 && out[k-1].Last+1 == f.First {
			out[k-1].Last = f.Last
			continue
		}
		out = append(out, f)
	}
	return out
}

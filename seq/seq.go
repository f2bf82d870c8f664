// Package seq owns what is pure in firn's per-key sequence generators
// (`--generator chats=seq`): the definition (the number of sections, fixed
// at creation and pinned), which section a key belongs to, which live node
// should own a section (rendezvous hashing), and the bounds of a request.
// It imports only the standard library and segment, whose counter record
// keeps the sections' persisted maxima. seq/sections serves the sections a
// node owns; server/core runs a sequence generator on a node
// (docs/design.md, Per-key sequences).
package seq

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/firnid/firn/segment"
)

// Kind is the word that starts every sequence definition.
const Kind = segment.SeqKind

// DefaultSections is the number of sections of a plain `seq`.
const DefaultSections = 64

// MaxKey is the longest key, in bytes.
const MaxKey = 256

// MaxCount is the most values one NextSeq item asks for.
const MaxCount = 10000

// MaxItems is the most items one NextSeqs call carries.
const MaxItems = 1000

// Definition is a sequence generator's definition.
type Definition struct {
	Sections int // sections the keys hash to, in [1, segment.MaxSections]
}

// IsDefinition reports whether s names the sequence kind (it may still be
// refused by ParseDefinition).
func IsDefinition(s string) bool {
	s = strings.TrimSpace(s)
	return s == Kind || strings.HasPrefix(s, Kind+",")
}

// ParseDefinition reads `seq`, optionally followed by `,sections=S`. Every
// refusal names the field and the bound.
func ParseDefinition(s string) (Definition, error) {
	parts := strings.Split(strings.TrimSpace(s), ",")
	if strings.TrimSpace(parts[0]) != Kind {
		return Definition{}, &segment.DefinitionError{Field: "kind", Reason: fmt.Sprintf("%q does not start with %q", s, Kind)}
	}
	d := Definition{Sections: DefaultSections}
	seen := map[string]bool{}
	for _, part := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return Definition{}, &segment.DefinitionError{Field: "seq", Reason: fmt.Sprintf("%q is not key=value (sections=S)", part)}
		case seen[k]:
			return Definition{}, &segment.DefinitionError{Field: k, Reason: "given twice"}
		case k != "sections":
			return Definition{}, &segment.DefinitionError{Field: k, Reason: "unknown parameter: a sequence generator takes sections=S"}
		}
		seen[k] = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > segment.MaxSections {
			return Definition{}, &segment.DefinitionError{Field: "sections", Reason: fmt.Sprintf("%q is not an integer in [1, %d]", v, segment.MaxSections)}
		}
		d.Sections = n
	}
	return d, nil
}

// Counter is the definition of the coordinator's record of d.
func (d Definition) Counter() segment.Definition { return segment.SeqDefinition(d.Sections) }

// String is the canonical form the pin compares.
func (d Definition) String() string { return d.Counter().String() }

// Hash is a key's 64-bit FNV-1a hash. Clients compute it too: the section
// of a key is Hash(key) mod sections (firn.proto, NextSeqRequest).
func Hash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

// Section is the section of a key whose Hash is h.
func (d Definition) Section(h uint64) int { return int(h % uint64(d.Sections)) }

// CheckKey refuses an empty or oversized key, naming the bound.
func CheckKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKey {
		return fmt.Errorf("key is %d bytes: a key is 1 to %d bytes", len(key), MaxKey)
	}
	return nil
}

// CheckCount refuses a count outside [1, MaxCount], naming the bound.
func CheckCount(n uint64) error {
	if n < 1 || n > MaxCount {
		return fmt.Errorf("count %d is outside [1, %d]", n, MaxCount)
	}
	return nil
}

// Assign gives each of S sections its owner among members (their
// instance IDs; the result has S entries, all "" when there are no
// members). Every member owns ⌊S/n⌋ or ⌈S/n⌉ sections, and each section
// goes to the member that weighs most for it among those with room:
// (section, member) pairs are taken in decreasing rendezvous weight, and
// a pair is kept while its section is free and its member below its
// share. A member joining or leaving therefore moves mostly the sections
// it gains or loses, and a small generator is not left with a member that
// owns nothing (plain rendezvous gives three members 8/8/0 of 16 sections
// about once in 200 draws). The result depends on the set of members, not
// their order.
func Assign(S int, members []string) []string {
	owners := make([]string, S)
	n := len(members)
	if n == 0 || S <= 0 {
		return owners
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	n = len(ms)
	type pair struct {
		w    uint64
		s, m int32
	}
	pairs := make([]pair, 0, S*n)
	for mi, m := range ms {
		h := Hash([]byte(m))
		for s := range S {
			pairs = append(pairs, pair{w: weight(h, s), s: int32(s), m: int32(mi)})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.w != b.w:
			return cmp.Compare(b.w, a.w)
		case a.s != b.s:
			return cmp.Compare(a.s, b.s)
		}
		return cmp.Compare(a.m, b.m)
	})
	floor, extra := S/n, S%n // extra members may own floor+1
	count := make([]int, n)
	left := S
	for _, p := range pairs {
		if owners[p.s] != "" {
			continue
		}
		c := count[p.m]
		if c > floor || (c == floor && extra == 0) {
			continue
		}
		if c == floor {
			extra--
		}
		count[p.m]++
		owners[p.s] = ms[p.m]
		if left--; left == 0 {
			break
		}
	}
	return owners
}

// weight is member h's rendezvous weight for section s.
func weight(h uint64, s int) uint64 {
	return mix(h ^ mix(uint64(s)+0x9e3779b97f4a7c15))
}

// mix is a 64-bit finalizer (splitmix64's): every input bit moves every
// output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

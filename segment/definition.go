// Package segment owns what is pure in firn's second kind of generator, the
// segment generator (dense IDs from a counter): its definition — the
// first ID and the largest — in the canonical form a pin compares, and the
// counter's stored state (Counter) with the rules of its claims,
// hand-backs and bumps. It imports only the standard library; the
// coordinator stores the counter (coordinator.Counters),
// segment/source serves claimed segments, and server/core runs a segment
// generator on a node.
package segment

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is the word that starts every segment definition.
const Kind = "segment"

// MaxID is the largest ID a segment generator may hand out by default:
// IDs travel as uint64 but many callers store them in a signed 64-bit
// column.
const MaxID uint64 = math.MaxInt64

// JSMaxID is the largest integer a JavaScript number holds exactly
// (2^53 − 1): `max=9007199254740991` keeps every ID exact in a browser.
const JSMaxID uint64 = 1<<53 - 1

// Definition is a segment generator's definition: it hands out IDs from
// Start to Max, both included, and never an ID outside them.
type Definition struct {
	Start uint64 // the first ID (default 1)
	Max   uint64 // the largest ID (default MaxID)
	// Sections, when positive, makes this the counter of a per-key
	// sequence generator (package seq): the record keeps one persisted
	// maximum per section (Counter.Sec) and Start, Max and Next are
	// unused (Start 1, Max MaxID). Its canonical form is the sequence
	// generator's (`seq,sections=S`).
	Sections int
}

// SeqKind is the word that starts every per-key sequence definition.
const SeqKind = "seq"

// MaxSections bounds a sequence generator's sections: the record keeps
// a maximum per section, and every node reads it several times a second.
const MaxSections = 1024

// IsSeq reports whether d is a per-key sequence generator's counter.
func (d Definition) IsSeq() bool { return d.Sections > 0 }

// SeqDefinition is the counter definition of a sequence generator with
// sections sections.
func SeqDefinition(sections int) Definition {
	return Definition{Start: 1, Max: MaxID, Sections: sections}
}

// ErrDefinition marks every refusal of ParseDefinition and Validate.
var ErrDefinition = errors.New("segment: invalid definition")

// DefinitionError names the field of a refused definition and the bound
// it broke.
type DefinitionError struct {
	Field  string
	Reason string
}

func (e *DefinitionError) Error() string {
	return fmt.Sprintf("segment: invalid definition: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrDefinition) true.
func (e *DefinitionError) Is(target error) bool { return target == ErrDefinition }

func defErr(field, format string, args ...any) error {
	return &DefinitionError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Default is the definition of a plain `segment`: IDs from 1 to MaxID.
func Default() Definition { return Definition{Start: 1, Max: MaxID} }

// IsDefinition reports whether s names the segment kind (it may still be
// refused by ParseDefinition): what tells a segment generator's definition
// from a layout.
func IsDefinition(s string) bool {
	s = strings.TrimSpace(s)
	return s == Kind || strings.HasPrefix(s, Kind+",")
}

// ParseDefinition reads `segment`, optionally followed by `,start=N` and
// `,max=M` in any order: Start in [1, Max), Max in [2, MaxID] (a larger
// max would not fit a signed 64-bit column; none asks for more). Every
// refusal names the field and the bound.
func ParseDefinition(s string) (Definition, error) {
	parts := strings.Split(strings.TrimSpace(s), ",")
	if strings.TrimSpace(parts[0]) != Kind {
		return Definition{}, defErr("kind", "%q does not start with %q", s, Kind)
	}
	d := Default()
	seen := map[string]bool{}
	for _, part := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return Definition{}, defErr("segment", "%q is not key=value (start=N or max=M)", part)
		case seen[k]:
			return Definition{}, defErr(k, "given twice")
		}
		seen[k] = true
		n, err := strconv.ParseUint(v, 10, 64)
		switch k {
		case "start":
			if err != nil || n < 1 || n >= MaxID {
				return Definition{}, defErr("start", "%q is not an integer in [1, %d)", v, MaxID)
			}
			d.Start = n
		case "max":
			if err != nil || n < 2 || n > MaxID {
				return Definition{}, defErr("max", "%q is not an integer in [2, %d]", v, MaxID)
			}
			d.Max = n
		default:
			return Definition{}, defErr(k, "unknown parameter: a segment takes start=N and max=M")
		}
	}
	return d, d.Validate()
}

// Validate checks the bounds ParseDefinition enforces, for a definition
// built in code.
func (d Definition) Validate() error {
	if d.Sections != 0 {
		if d.Sections < 1 || d.Sections > MaxSections {
			return defErr("sections", "%d is outside [1, %d]", d.Sections, MaxSections)
		}
		if d.Start != 1 || d.Max != MaxID {
			return defErr("sections", "a sequence generator's counter has start 1 and max %d", MaxID)
		}
		return nil
	}
	switch {
	case d.Max < 2 || d.Max > MaxID:
		return defErr("max", "%d is outside [2, %d]", d.Max, MaxID)
	case d.Start < 1:
		return defErr("start", "%d is below 1", d.Start)
	case d.Start >= d.Max:
		return defErr("start", "%d is not below max %d", d.Start, d.Max)
	}
	return nil
}

// String is the canonical form: every field, always in the same order,
// so that two nodes' definitions are equal exactly when their strings
// are (the coordinator's pin compares them).
func (d Definition) String() string {
	if d.IsSeq() {
		return fmt.Sprintf("%s,sections=%d", SeqKind, d.Sections)
	}
	return fmt.Sprintf("%s,start=%d,max=%d", Kind, d.Start, d.Max)
}

// Size is how many IDs the definition allows.
func (d Definition) Size() uint64 { return d.Max - d.Start + 1 }

package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Errors of Definitions, checked with errors.Is.
var (
	// ErrDefinitionExists: CreateDefinition found a definition of that
	// name already stored (serving or retired); *DefinitionExistsError
	// carries it.
	ErrDefinitionExists = errors.New("coordinator: generator already defined")
	// ErrNoDefinition: no definition of that name is stored.
	ErrNoDefinition = errors.New("coordinator: no such generator definition")
)

// DefinitionSchema is the schema of the definition records this binary
// writes and understands.
const DefinitionSchema = 1

// Definitions holds the generators defined at runtime (`firn generator
// create`): one record per generator, beside its pin, created if absent
// and never deleted (a retired one stays, so its name is not reused for
// another ID space).
type Definitions interface {
	// CreateDefinition stores d if no definition of d.Name is stored, in
	// one create-if-absent write, stamping d.Schema with
	// DefinitionSchema. An existing one (serving or retired) is left as it
	// is and returned in a *DefinitionExistsError (ErrDefinitionExists).
	// A d that does not Validate is refused (ErrInvalidSpec).
	CreateDefinition(ctx context.Context, d GeneratorDefinition) error
	// RetireDefinition marks the definition of name retired at at, for
	// why, and returns it. It is idempotent: a retired one is returned as
	// it stands, with its first retirement's time and reason. An unknown
	// name: ErrNoDefinition.
	RetireDefinition(ctx context.Context, name, why string, at time.Time) (GeneratorDefinition, error)
	// Definitions returns every definition of this cluster, retired ones
	// included, sorted by name. A record that does not read (written by a
	// newer binary: ErrSchemaTooNew; not JSON; naming another generator)
	// is left out and named, with where it is stored and why, in a
	// *UnreadableDefinitionsError returned beside the definitions read:
	// it affects its own generator alone (a node must not serve from a
	// definition it cannot read whole, and need not stop the others). A
	// caller that does not look for that error fails as on any other.
	Definitions(ctx context.Context) ([]GeneratorDefinition, error)
}

// GeneratorDefinition is one generator defined at runtime, as stored
// (JSON) in the coordinator.
type GeneratorDefinition struct {
	Name string `json:"name"`
	// Definition is the canonical definition: what `--generator
	// NAME=DEFINITION` takes (a layout's canonical string, a segment or a
	// seq definition). The coordinator treats it as opaque.
	Definition string `json:"definition"`
	// Allow are the caller names (mTLS certificate CN or DNS SAN) that
	// may draw from the generator; empty: every caller.
	Allow []string `json:"allow,omitempty"`
	// Above is the ID (decimal) the generator was created above (`firn
	// generator create --above`), for describe; "" when none.
	Above   string    `json:"above,omitempty"`
	Created time.Time `json:"created"`
	// Retired is when it was retired; zero while it serves.
	Retired    time.Time `json:"retired,omitzero"`
	RetiredWhy string    `json:"retired_why,omitempty"`
	Schema     int       `json:"schema"`
}

// IsRetired reports whether the definition was retired.
func (d GeneratorDefinition) IsRetired() bool { return !d.Retired.IsZero() }

// Validate refuses a definition that cannot be stored, naming the field
// and the bound. Errors match ErrInvalidSpec.
func (d GeneratorDefinition) Validate() error {
	inv := ErrInvalidSpec
	switch {
	case d.Name == "" || strings.ContainsAny(d.Name, "/\x00") || len(d.Name) > 128:
		return fmt.Errorf("%w: GeneratorDefinition.Name %q must be 1..128 bytes without '/'", inv, d.Name)
	case strings.TrimSpace(d.Definition) == "" || len(d.Definition) > 1024:
		return fmt.Errorf("%w: generator %q: GeneratorDefinition.Definition must be 1..1024 bytes, not %d", inv, d.Name, len(d.Definition))
	case d.Created.IsZero():
		return fmt.Errorf("%w: generator %q: GeneratorDefinition.Created is zero", inv, d.Name)
	case len(d.Allow) > 1024:
		return fmt.Errorf("%w: generator %q: GeneratorDefinition.Allow has %d names, at most 1024", inv, d.Name, len(d.Allow))
	}
	seen := make(map[string]bool, len(d.Allow))
	for i, a := range d.Allow {
		switch {
		case a == "" || len(a) > 255:
			return fmt.Errorf("%w: generator %q: GeneratorDefinition.Allow[%d] %q must be 1..255 bytes", inv, d.Name, i, a)
		case seen[a]:
			return fmt.Errorf("%w: generator %q: GeneratorDefinition.Allow names %q twice", inv, d.Name, a)
		}
		seen[a] = true
	}
	return nil
}

// Allows reports whether caller may draw from the generator: every caller
// when Allow is empty, else exactly the names it lists.
func (d GeneratorDefinition) Allows(caller string) bool {
	if len(d.Allow) == 0 {
		return true
	}
	for _, a := range d.Allow {
		if a == caller {
			return true
		}
	}
	return false
}

// Retire is d retired at at for why, and whether that changed it: a
// definition already retired keeps its first retirement.
func (d GeneratorDefinition) Retire(why string, at time.Time) (GeneratorDefinition, bool) {
	if d.IsRetired() {
		return d, false
	}
	d.Allow = append([]string(nil), d.Allow...)
	d.Retired, d.RetiredWhy = at.UTC(), why
	return d, true
}

// DefinitionExistsError is CreateDefinition's refusal of a name already
// defined, carrying the stored definition. It matches ErrDefinitionExists.
type DefinitionExistsError struct{ Existing GeneratorDefinition }

func (e *DefinitionExistsError) Error() string {
	state := "serving"
	if e.Existing.IsRetired() {
		state = "retired at " + e.Existing.Retired.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("coordinator: generator %q is already defined as %q (created %s, %s)",
		e.Existing.Name, e.Existing.Definition, e.Existing.Created.UTC().Format(time.RFC3339), state)
}

func (e *DefinitionExistsError) Is(target error) bool { return target == ErrDefinitionExists }

// EncodeDefinition is the stored form of d, with the schema this binary
// writes.
func EncodeDefinition(d GeneratorDefinition) []byte {
	d.Schema = DefinitionSchema
	b, _ := json.Marshal(d)
	return b
}

// DecodeDefinition reads the definition record of generator name stored
// at where. A record of a newer schema is refused (ErrSchemaTooNew), and
// so is one that does not parse or names another generator, each naming
// the generator and where it is stored.
func DecodeDefinition(name, where string, b []byte) (GeneratorDefinition, error) {
	var head struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return GeneratorDefinition{}, fmt.Errorf("coordinator: generator %q: definition %s is not readable: %w", name, where, err)
	}
	if head.Schema > DefinitionSchema {
		return GeneratorDefinition{}, fmt.Errorf("%w: generator %q: definition %s has schema %d, this binary knows %d: upgrade it",
			ErrSchemaTooNew, name, where, head.Schema, DefinitionSchema)
	}
	var d GeneratorDefinition
	if err := json.Unmarshal(b, &d); err != nil {
		return GeneratorDefinition{}, fmt.Errorf("coordinator: generator %q: definition %s is not readable: %w", name, where, err)
	}
	switch {
	case d.Schema < 1:
		return GeneratorDefinition{}, fmt.Errorf("coordinator: generator %q: definition %s has schema %d, not a schema firn writes", name, where, d.Schema)
	case d.Name != name:
		return GeneratorDefinition{}, fmt.Errorf("coordinator: generator %q: definition %s names generator %q", name, where, d.Name)
	}
	if err := d.Validate(); err != nil {
		return GeneratorDefinition{}, fmt.Errorf("coordinator: generator %q: definition %s: %w", name, where, err)
	}
	return d, nil
}

// SortDefinitions sorts ds by name.
func SortDefinitions(ds []GeneratorDefinition) {
	sort.Slice(ds, func(i, j int) bool { return ds[i].Name < ds[j].Name })
}

// UnreadableDefinition is a stored definition record that did not read:
// its generator, where it is stored, and why (DecodeDefinition's error).
type UnreadableDefinition struct {
	Name  string
	Where string
	Err   error
}

// UnreadableDefinitionsError is Definitions' report of the records it
// could not read; the definitions returned with it are all the others,
// read whole. errors.Is matches each record's cause (ErrSchemaTooNew for
// one a newer binary wrote).
type UnreadableDefinitionsError struct {
	Records []UnreadableDefinition // sorted by name
}

func (e *UnreadableDefinitionsError) Error() string {
	msgs := make([]string, len(e.Records))
	for i, r := range e.Records {
		msgs[i] = r.Err.Error()
	}
	return fmt.Sprintf("coordinator: %d generator definition record(s) not readable (the others read): %s",
		len(e.Records), strings.Join(msgs, "; "))
}

// Unwrap is the records' causes.
func (e *UnreadableDefinitionsError) Unwrap() []error {
	errs := make([]error, len(e.Records))
	for i, r := range e.Records {
		errs[i] = r.Err
	}
	return errs
}

// UnreadableDefinitions builds Definitions' answer from the records read
// (ds) and those that did not read: ds sorted, and an
// *UnreadableDefinitionsError naming the latter (nil when none).
func UnreadableDefinitions(ds []GeneratorDefinition, bad []UnreadableDefinition) ([]GeneratorDefinition, error) {
	SortDefinitions(ds)
	if len(bad) == 0 {
		return ds, nil
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Name < bad[j].Name })
	return ds, &UnreadableDefinitionsError{Records: bad}
}

// SplitDefinitions reads Definitions' answer for a caller that serves
// the readable definitions and reports the others: ds and the unreadable
// records when err is an *UnreadableDefinitionsError (err nil then), and
// err itself otherwise (the read failed whole).
func SplitDefinitions(ds []GeneratorDefinition, err error) ([]GeneratorDefinition, []UnreadableDefinition, error) {
	var ue *UnreadableDefinitionsError
	switch {
	case err == nil:
		return ds, nil, nil
	case errors.As(err, &ue):
		return ds, ue.Records, nil
	}
	return nil, nil, err
}

package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/firnid/firn/coordinator"
)

// A node follows the definitions of its generators that `firn generator
// create` stored in the coordinator (coordinator.Definitions): every
// defsEvery it reads them, and for each generator it runs (by its
// --generator flag) takes the definition's allow list and its retirement.
// A retired generator is refused NOT_FOUND naming the retirement; an
// allow list is enforced as --allow-callers is (Authorize). A generator
// the coordinator defines and the node does not run is not started here:
// the node still needs its --generator flag.

// defsEvery is how often a node reads its generators' definitions: a
// retirement or an allow list takes effect within that and one read.
const defsEvery = 2 * time.Second

// access is what a generator's definition says of who may use it, as
// last read (nil until a definition is read).
type access struct {
	allow      []string  // the definition's allow list (empty: the flag's, if any)
	retired    time.Time // zero: not retired
	retiredWhy string
}

// RetiredError refuses a call to a generator its definition retired
// (`firn generator retire`): NOT_FOUND, naming when and why.
type RetiredError struct {
	Generator string
	At        time.Time
	Why       string
}

func (e *RetiredError) Error() string {
	why := ""
	if e.Why != "" {
		why = ": " + e.Why
	}
	return fmt.Sprintf("%v %q: retired at %s%s", ErrUnknownGenerator, e.Generator, e.At.UTC().Format(time.RFC3339), why)
}

func (e *RetiredError) Is(target error) bool { return target == ErrUnknownGenerator }

// retiredErr is rt's refusal when its definition retired it (nil
// otherwise).
func (rt *Generator) retiredErr() error {
	if a := rt.acc.Load(); a != nil && !a.retired.IsZero() {
		return &RetiredError{Generator: rt.cfg.Name, At: a.retired, Why: a.retiredWhy}
	}
	return nil
}

// allowList is who may use rt: its definition's list when it names
// callers, else --allow-callers' (empty: every caller).
func (rt *Generator) allowList() []string {
	if a := rt.acc.Load(); a != nil && len(a.allow) > 0 {
		return a.allow
	}
	return rt.cfg.Allow
}

// readDefinitions reads the coordinator's definitions once and applies
// those of this node's generators. A failed read keeps what was read
// before.
func (c *Core) readDefinitions(ctx context.Context, defs coordinator.Definitions) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timing.Timeout)
	defer cancel()
	all, err := defs.Definitions(rctx)
	if err != nil {
		return err
	}
	byName := make(map[string]coordinator.GeneratorDefinition, len(all))
	for _, d := range all {
		byName[d.Name] = d
	}
	var disagree []string
	for _, rt := range c.gens {
		d, ok := byName[rt.cfg.Name]
		if !ok {
			rt.acc.Store(nil)
			continue
		}
		if stored, err := ParseGeneratorDefinition(d.Name, d.Definition); err != nil || stored.Spec() != rt.cfg.Spec() {
			disagree = append(disagree, fmt.Sprintf("%s: --generator %s=%s, the coordinator's %s", rt.cfg.Name, rt.cfg.Name, rt.cfg.Spec(), d.Definition))
		}
		a := &access{allow: slices.Clone(d.Allow), retired: d.Retired, retiredWhy: d.RetiredWhy}
		if len(a.allow) > 0 {
			c.allow.Store(true)
		}
		if old := rt.acc.Load(); (old == nil || old.retired.IsZero()) && !a.retired.IsZero() {
			c.log.Warn("generator retired in the coordinator: refusing its calls", "generator", rt.cfg.Name,
				"retired", a.retired, "why", a.retiredWhy)
		}
		rt.acc.Store(a)
	}
	if len(disagree) > 0 {
		return &DisagreeError{Generators: disagree}
	}
	return nil
}

// DisagreeError: a generator this node runs by its flag is defined
// otherwise in the coordinator (`firn generator create`). The node does
// not start: the first to serve would pin its own definition, and the
// generator would have two.
type DisagreeError struct {
	Generators []string // "name: the flag's, the coordinator's"
}

func (e *DisagreeError) Error() string {
	return fmt.Sprintf("%v: generator: the flags and the coordinator's definitions disagree (the flags must name the stored definition): %s",
		ErrConfig, strings.Join(e.Generators, "; "))
}

func (e *DisagreeError) Is(target error) bool { return target == ErrConfig }

// defsLoop reads the definitions every defsEvery until ctx ends.
func (c *Core) defsLoop(ctx context.Context, defs coordinator.Definitions) {
	t := time.NewTicker(defsEvery)
	defer t.Stop()
	var failing bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.readDefinitions(ctx, defs)
		switch {
		case err != nil && !failing && ctx.Err() == nil && !errors.Is(err, context.Canceled):
			c.log.Warn("reading the generators' definitions failed: keeping the last read", "err", err)
		case err == nil && failing:
			c.log.Info("reading the generators' definitions again")
		}
		failing = err != nil
	}
}

package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// A node follows the generators' definitions that `firn generator create`
// stored in the coordinator (coordinator.Definitions): at start and every
// defsEvery it reads them. A definition of a generator the node does not
// run starts it there and then (addDefined: its holders take a worker as
// at start, restore guard included), as if its flags had named it. For
// each generator it runs, the definition's allow list is enforced as
// --allow-callers is (Authorize), and a retirement stops it: its calls
// are refused NOT_FOUND naming the retirement, and its holders release
// their workers (retire). A flag naming another definition than the
// stored one stops the start (DisagreeError).

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
	running := map[string]bool{}
	for _, rt := range c.Generators() {
		running[rt.cfg.Name] = true
		d, ok := byName[rt.cfg.Name]
		if !ok {
			if a := rt.acc.Load(); a == nil || a.retired.IsZero() {
				rt.acc.Store(nil) // a retirement is for good, even were its record lost
			}
			continue
		}
		if stored, err := ParseGeneratorDefinition(d.Name, d.Definition); err != nil || stored.Spec() != rt.cfg.Spec() {
			disagree = append(disagree, fmt.Sprintf("%s: --generator %s=%s, the coordinator's %s", rt.cfg.Name, rt.cfg.Name, rt.cfg.Spec(), d.Definition))
		}
		a := accessOf(d)
		if len(a.allow) > 0 {
			c.allow.Store(true)
		}
		old := rt.acc.Load()
		rt.acc.Store(a)
		if (old == nil || old.retired.IsZero()) && !a.retired.IsZero() {
			c.retire(rt)
		}
	}
	if len(disagree) > 0 {
		return &DisagreeError{Generators: disagree}
	}
	for _, d := range all {
		if !running[d.Name] && d.Retired.IsZero() {
			c.addDefined(d)
		}
	}
	return nil
}

// accessOf is what d says of who may use its generator.
func accessOf(d coordinator.GeneratorDefinition) *access {
	return &access{allow: slices.Clone(d.Allow), retired: d.Retired, retiredWhy: d.RetiredWhy}
}

// retire stops rt for good, its definition retired: its calls are refused
// NOT_FOUND naming the retirement (Lookup), its state drains with the
// same reason, and once started its holders release their workers, a
// sequence generator its sections, a segment generator hands back what
// it holds unused.
func (c *Core) retire(rt *Generator) {
	err := rt.retiredErr()
	c.log.Warn("generator retired in the coordinator: refusing its calls and releasing its workers", "generator", rt.cfg.Name, "err", err)
	c.addMu.Lock()
	started := rt.stopRun != nil
	c.addMu.Unlock()
	if !started {
		return // start drains it instead of launching it (launch)
	}
	rt.state.Drain(err.Error())
	rt.stopRun()
	if rt.seqm != nil {
		c.stopSeq(rt)
	}
	c.stopSegment(rt)
}

// addDefined starts a generator the coordinator defines (d) and this node
// does not run: built from the definition with the node's flags as for
// one of --generator (max-lead, max-staleness, workers, limits), wired to
// the clock policy, published, and — once the core runs — started. A
// definition this node cannot run (a layout its max-lead does not fit,
// say) is logged once and left alone.
func (c *Core) addDefined(d coordinator.GeneratorDefinition) {
	c.addMu.Lock()
	defer c.addMu.Unlock()
	set := c.set.Load()
	if _, ok := set.byName[d.Name]; ok || c.drained.Load() {
		return
	}
	if _, ok := c.skipped[d.Name]; ok {
		return
	}
	wall, _ := c.clock.Now()
	gc, err := ParseGeneratorDefinition(d.Name, d.Definition)
	if err == nil {
		err = c.cfg.finishGenerator(&gc, wall)
	}
	var rt *Generator
	if err == nil {
		rt, err = c.build(gc, false)
	}
	if err != nil {
		c.skipped[d.Name] = err.Error()
		c.log.Warn("the coordinator defines a generator this node cannot run: not started", "generator", d.Name,
			"definition", d.Definition, "err", err)
		return
	}
	rt.acc.Store(accessOf(d))
	if len(d.Allow) > 0 {
		c.allow.Store(true)
		if !c.cfg.MutualTLS() {
			c.log.Warn("generator has an allow list and this node has no mTLS (--tls-client-ca): every caller is refused",
				"generator", d.Name)
		}
	}
	c.hm.restores.WithLabelValues(gc.Name)
	c.wire(rt)
	if !rt.isSegment() {
		c.policy.Add(policyGen{rt})
	}
	for _, f := range c.onAdd {
		f(rt)
	}
	// Launched before it is published (a running core's), so that what
	// launch sets (a segment's source, a sequence's sections) is there for
	// every call that finds it; before Start, start launches it with the
	// others.
	if c.runCtx != nil {
		if err := c.launch(rt, c.prepare(c.runCtx, rt)); err != nil {
			rt.state.SetCause(clockguard.SourceLease, "starting from the coordinator's definition: "+err.Error(), clockguard.Detail{Code: clockguard.CodeStarting})
			c.log.Warn("generator defined in the coordinator did not start", "generator", d.Name, "err", err)
		}
	}
	next := &genSet{list: append(slices.Clone(set.list), rt), byName: maps.Clone(set.byName)}
	next.byName[d.Name] = rt
	c.set.Store(next)
	c.log.Info("generator started from the coordinator's definition", "generator", d.Name, "definition", d.Definition)
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

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
// stored one stops the start (DisagreeError); found later, it holds that
// generator alone.
//
// What a generator's definition says must be known before it serves: a
// node starts none until it has read the definitions once (each waits,
// STARTING, naming the read's error), and a generator whose own record
// does not read (a newer binary's schema, a hand-edited key) is refused
// naming the record, as neither its retirement nor its allow list can be
// checked; the others go on (sourceDefinitions, retiredErr).

// defsEvery is how often a node reads its generators' definitions: a
// retirement or an allow list takes effect within that and one read.
const defsEvery = 2 * time.Second

// sourceDefinitions holds a generator out of service while its stored
// definition is not known (not read yet, or its record does not read) or
// names another definition than the one the node runs.
const sourceDefinitions clockguard.Source = "definitions"

// allowNeedsMTLS is the hold of a generator whose stored definition has
// an allow list on a node without mTLS: no caller can be named, so none
// can be served. Held (OPERATOR_HOLD, until the node runs with
// --tls-client-ca), /readyz, health and every call's refusal name the
// node's configuration — not PERMISSION_DENIED, which would blame the
// caller while /readyz said ready. The flag's equivalent
// (--allow-callers without --tls-client-ca) is refused at start.
const allowNeedsMTLS = "its stored definition serves named callers only (an allow list), and this node has no mTLS (--tls-client-ca): no caller can be named, so none is served"

// access is what a generator's definition says of who may use it, as
// last read (nil: no definition is stored for it, or the node has no
// definitions to read).
type access struct {
	allow      []string  // the definition's allow list (empty: the flag's, if any)
	retired    time.Time // zero: not retired
	retiredWhy string
	// unknown says why the definition is not known, "" once read: the
	// definitions not read yet since the node started (unknownCode
	// STARTING), or the generator's record does not read
	// (COORDINATOR_UNAVAILABLE). Such a generator is refused (retiredErr)
	// and not started.
	unknown     string
	unknownCode clockguard.Code
	neverRead   bool // not read once since the node started
	// disagree: the stored definition is not the one the node runs
	// (DisagreeError's line); the generator is held, and not started.
	disagree string
}

// settled reports whether what rt's definition says is known and lets it
// start: no definition, a retired one (its start drains it), or one read
// and agreeing with the node's.
func (a *access) settled() bool {
	return a == nil || !a.retired.IsZero() || (a.unknown == "" && a.disagree == "")
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

// retiredErr is rt's retirement by its stored definition, a
// *RetiredError (NOT_FOUND; nil when not retired): Find and Lookup
// refuse with it.
func (rt *Generator) retiredErr() error {
	if a := rt.acc.Load(); a != nil && !a.retired.IsZero() {
		return &RetiredError{Generator: rt.cfg.Name, At: a.retired, Why: a.retiredWhy}
	}
	return nil
}

// Retired reports whether rt's stored definition retired it: it stays in
// the node's list, drained, until the node stops (firn_generator_retired).
func (rt *Generator) Retired() bool {
	a := rt.acc.Load()
	return a != nil && !a.retired.IsZero()
}

// definitionErr is rt's refusal by its stored definition for a call that
// uses it (nil when none): retired (retiredErr), or not known (not read
// yet, or its record does not read), a *NotServingError naming why —
// every such call, Decode included, as its allow list cannot be checked
// (the flag's is no stand-in for a stored one). Lookup refuses with it;
// what only looks at the generator (Find: its status, its state) does
// not.
func (rt *Generator) definitionErr() error {
	if err := rt.retiredErr(); err != nil {
		return err
	}
	if a := rt.acc.Load(); a != nil && a.unknown != "" {
		// The refusal its state gives: the state holds the wait (or the
		// unreadable record) as a cause, beside any other it holds.
		if err := rt.refusal(); err != nil {
			return err
		}
		return &NotServingError{Generator: rt.cfg.Name, Reason: a.unknown, Code: a.unknownCode, RetryAfter: defsEvery}
	}
	return nil
}

// allowList is who may use rt: its definition's list when it names
// callers, else --allow-callers' (empty: every caller). A generator whose
// definition is not known has no list here: Lookup refuses it first.
func (rt *Generator) allowList() []string {
	if a := rt.acc.Load(); a != nil && len(a.allow) > 0 {
		return a.allow
	}
	return rt.cfg.Allow
}

// awaitDefinitions marks every generator as waiting for the first read of
// the definitions: refused and held STARTING, and not started, until the
// read settles it (readDefinitions, launchSettled).
func (c *Core) awaitDefinitions(why string) {
	c.defsUnread.Store(&why)
	for _, rt := range c.Generators() {
		awaitOne(rt, why)
	}
}

// readDefinitions reads the coordinator's definitions once and applies
// those of this node's generators. A read that fails whole keeps what was
// read before (a generator never read goes on waiting, naming the error).
// A record that does not read holds its own generator alone; a stored
// definition that disagrees with the node's holds that generator alone
// and is returned (*DisagreeError), with the unreadable records
// (*coordinator.UnreadableDefinitionsError), once every other definition
// is applied.
func (c *Core) readDefinitions(ctx context.Context, defs coordinator.Definitions) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timing.Timeout)
	ds, err := defs.Definitions(rctx)
	cancel()
	all, bad, err := coordinator.SplitDefinitions(ds, err)
	if err != nil {
		if c.defsUnread.Load() != nil {
			why := err.Error()
			c.defsUnread.Store(&why)
		}
		for _, rt := range c.Generators() {
			if a := rt.acc.Load(); a != nil && a.neverRead {
				awaitOne(rt, err.Error())
			}
		}
		return err
	}
	byName := make(map[string]coordinator.GeneratorDefinition, len(all))
	for _, d := range all {
		byName[d.Name] = d
	}
	unreadable := make(map[string]coordinator.UnreadableDefinition, len(bad))
	for _, u := range bad {
		unreadable[u.Name] = u
	}
	defer c.defsUnread.Store(nil) // read: a name not added below is not defined
	var disagree []string
	running := map[string]bool{}
	for _, rt := range c.Generators() {
		running[rt.cfg.Name] = true
		old := rt.acc.Load()
		if old != nil && !old.retired.IsZero() {
			continue // a retirement is for good, even were its record lost or unreadable
		}
		if u, ok := unreadable[rt.cfg.Name]; ok {
			reason := "its stored definition does not read, so its retirement and allow list cannot be checked: " + u.Err.Error()
			a := &access{unknown: reason, unknownCode: clockguard.CodeCoordinatorUnavailable}
			if old != nil {
				a.allow = old.allow
			}
			rt.acc.Store(a)
			rt.state.SetCause(sourceDefinitions, reason, clockguard.Detail{Code: clockguard.CodeCoordinatorUnavailable, RetryEvery: defsEvery})
			continue
		}
		d, ok := byName[rt.cfg.Name]
		if !ok && old != nil && len(old.allow) > 0 {
			// A stored allow list, as a retirement, is kept were its record
			// lost later (a coordinator restored from an older snapshot):
			// the flag's list is no stand-in for a stored one.
			rt.acc.Store(&access{allow: old.allow})
			if c.cfg.MutualTLS() {
				rt.state.Clear(sourceDefinitions)
			} else {
				rt.state.SetCause(sourceDefinitions, allowNeedsMTLS, clockguard.Detail{Code: clockguard.CodeOperatorHold})
			}
			continue
		}
		if !ok {
			rt.acc.Store(nil)
			rt.state.Clear(sourceDefinitions)
			continue
		}
		a := accessOf(d)
		if stored, err := ParseGeneratorDefinition(d.Name, d.Definition); err != nil || stored.Spec() != rt.cfg.Spec() {
			a.disagree = fmt.Sprintf("%s: --generator %s=%s, the coordinator's %s", rt.cfg.Name, rt.cfg.Name, rt.cfg.Spec(), d.Definition)
			disagree = append(disagree, a.disagree)
			rt.state.SetCause(sourceDefinitions, "the flags and the coordinator's definition disagree (the flags must name the stored definition): "+a.disagree,
				clockguard.Detail{Code: clockguard.CodeOperatorHold})
		} else if len(a.allow) > 0 && !c.cfg.MutualTLS() {
			rt.state.SetCause(sourceDefinitions, allowNeedsMTLS, clockguard.Detail{Code: clockguard.CodeOperatorHold})
		}
		if len(a.allow) > 0 {
			c.allow.Store(true)
		}
		// Stored before the hold is cleared: the moment the state serves
		// (/readyz, health), Lookup finds the definition known and the
		// allow list in force.
		rt.acc.Store(a)
		if !a.retired.IsZero() {
			// Retired: the state goes from whatever holds it to draining,
			// never through serving (a hold cleared first would say ready
			// while Lookup refuses).
			c.retire(rt)
		} else if a.disagree == "" && (len(a.allow) == 0 || c.cfg.MutualTLS()) {
			rt.state.Clear(sourceDefinitions)
		}
	}
	for _, d := range all {
		if !running[d.Name] && d.Retired.IsZero() {
			c.addDefined(d)
		}
	}
	var errs []error
	if len(bad) > 0 {
		errs = append(errs, &coordinator.UnreadableDefinitionsError{Records: bad})
	}
	if len(disagree) > 0 {
		errs = append(errs, &DisagreeError{Generators: disagree})
	}
	return errors.Join(errs...)
}

// awaitOne holds rt, its definition never read, naming why.
func awaitOne(rt *Generator, why string) {
	reason := "reading the generators' definitions: " + why
	rt.acc.Store(&access{unknown: reason, unknownCode: clockguard.CodeStarting, neverRead: true})
	rt.state.SetCause(sourceDefinitions, reason, clockguard.Detail{Code: clockguard.CodeStarting, RetryEvery: defsEvery})
}

// launchSettled starts, on the running core, each generator start left
// waiting for its definition (never prepared) once the definition is read
// and settles it: as addDefined starts one.
func (c *Core) launchSettled() {
	c.addMu.Lock()
	defer c.addMu.Unlock()
	if c.runCtx == nil || c.drained.Load() {
		return
	}
	for _, rt := range c.Generators() {
		if rt.stopRun != nil || !rt.acc.Load().settled() {
			continue
		}
		if err := c.launch(rt, c.prepare(c.runCtx, rt)); err != nil {
			rt.state.SetCause(clockguard.SourceLease, "starting once its definition was read: "+err.Error(), clockguard.Detail{Code: clockguard.CodeStarting})
			c.log.Warn("generator did not start once its definition was read", "generator", rt.cfg.Name, "err", err)
			continue
		}
		c.log.Info("generator started: its definition was read", "generator", rt.cfg.Name)
	}
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
	if _, ok := c.skipped.Load(d.Name); ok {
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
		c.skipped.Store(d.Name, err.Error())
		c.log.Warn("the coordinator defines a generator this node cannot run: not started", "generator", d.Name,
			"definition", d.Definition, "err", err)
		return
	}
	rt.acc.Store(accessOf(d))
	if len(d.Allow) > 0 {
		c.allow.Store(true)
		if !c.cfg.MutualTLS() {
			rt.state.SetCause(sourceDefinitions, allowNeedsMTLS, clockguard.Detail{Code: clockguard.CodeOperatorHold})
			c.log.Warn("generator has an allow list and this node has no mTLS (--tls-client-ca): held, serving no caller",
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
// otherwise in the coordinator (`firn generator create`). Found at start,
// the node does not start: the first to serve would pin its own
// definition, and the generator would have two. Found later (the
// definitions were not readable at start, or the definition was stored
// while the node ran), that generator is held naming it, and not started
// if it was not yet; the others go on.
type DisagreeError struct {
	Generators []string // "name: the flag's, the coordinator's"
}

func (e *DisagreeError) Error() string {
	return fmt.Sprintf("%v: generator: the flags and the coordinator's definitions disagree (the flags must name the stored definition): %s",
		ErrConfig, strings.Join(e.Generators, "; "))
}

func (e *DisagreeError) Is(target error) bool { return target == ErrConfig }

// defsLoop reads the definitions every defsEvery until ctx ends, and
// starts the generators a read settles (launchSettled). A read that fails
// whole is logged once while it fails; what a read leaves unapplied (a
// record that does not read, a disagreement) each time it changes, first
// the start's read (first) included.
func (c *Core) defsLoop(ctx context.Context, defs coordinator.Definitions, first error) {
	t := time.NewTicker(defsEvery)
	defer t.Stop()
	// The start's read was logged by start.
	failing := first != nil && !partialRead(first)
	var last string // what the last read left unapplied, as logged
	if first != nil && partialRead(first) {
		last = first.Error()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.readDefinitions(ctx, defs)
		c.launchSettled()
		if ctx.Err() != nil {
			return
		}
		whole := err != nil && !partialRead(err)
		switch {
		case whole && !failing && !errors.Is(err, context.Canceled):
			c.log.Warn("reading the generators' definitions failed: keeping the last read", "err", err)
		case !whole && failing:
			c.log.Info("reading the generators' definitions again")
		}
		failing = whole
		if whole {
			continue
		}
		switch msg := errString(err); {
		case msg == last:
		case err != nil:
			c.log.Warn("generators' definitions not applied: those generators are held, the others served", "err", err)
		default:
			c.log.Info("every generator's definition applied")
		}
		last = errString(err)
	}
}

// partialRead reports whether err, from readDefinitions, is a read that
// went through with some definitions left unapplied.
func partialRead(err error) bool {
	var ue *coordinator.UnreadableDefinitionsError
	var de *DisagreeError
	return errors.As(err, &ue) || errors.As(err, &de)
}

// errString is err's text, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

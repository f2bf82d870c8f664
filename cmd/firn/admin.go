package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/server/core"
)

// adminFlags are the flags of an admin command that reaches the
// coordinator directly: the coordinator flags of serve, which like serve's
// also come from FIRN_* variables and the --config file (a serve
// configuration file works as it is: its other keys are ignored), and
// the command's own --generator, command-line only.
type adminFlags struct {
	coord     coordConfig
	config    string
	generator string
	fs        *pflag.FlagSet
}

// adminGroups are the help's headings of an admin command.
var adminGroups = []helpGroup{{"Coordinator:", coordDetailFlags}}

func (c *adminFlags) register(fs *pflag.FlagSet, generatorDefault, generatorUsage string) {
	c.registerCoord(fs)
	fs.StringVar(&c.generator, "generator", generatorDefault, generatorUsage)
}

// registerCoord defines --config and the coordinator flags alone (firn
// generator, whose generator is an argument).
func (c *adminFlags) registerCoord(fs *pflag.FlagSet) {
	c.coord = defaultCoordConfig()
	c.fs = fs
	fs.StringVar(&c.config, "config", "", "YAML file of serve flags (the coordinator's are read; the others are ignored)")
	c.coord.register(fs)
}

// parse parses args, the coordinator flags layered as serve's (flag >
// FIRN_* > --config > default), the others from the command line only,
// and validates the coordinator flags.
func (c *adminFlags) parse(args []string, getenv func(string) string) error {
	only := coordFlagNames()
	only["config"] = true
	if err := parseLayered(c.fs, args, &c.config, layering{only: only, known: serveFlagNames()}, getenv); err != nil {
		return err
	}
	return c.coord.validate()
}

// open opens the coordinator for an admin command.
func (c *adminFlags) open() (*openedCoordinator, error) {
	return openCoordinator(c.coord, forAdmin, openEnv{clock: clockguard.NewSystem(), log: newLogger(io.Discard, "error")})
}

// splitGenerator reads --generator NAME[=LAYOUT]: the layout is optional
// (the pin in the coordinator is what counts).
func splitGenerator(s string) (name, layout string) {
	name, layout, _ = strings.Cut(s, "=")
	return strings.TrimSpace(name), strings.TrimSpace(layout)
}

// pinnedLayout is the layout of generator name: the one its pin holds. A
// layout given on the command line must be the same (compared in canonical
// form); it is used only when the coordinator has no pin for the generator.
func pinnedLayout(name, given string, st *coordinator.GeneratorState) (generator.Layout, error) {
	var want *generator.Layout
	if given != "" {
		l, err := generator.ParseLayout(given)
		if err != nil {
			return generator.Layout{}, fmt.Errorf("--generator %s: %w", name, err)
		}
		want = &l
	}
	if st == nil || st.Pin.Layout == "" {
		if want == nil {
			return generator.Layout{}, fmt.Errorf("generator %q has no pin in the coordinator (no node has used it since the restore): name its layout as --generator %s=LAYOUT", name, name)
		}
		return *want, nil
	}
	pinned, err := generator.ParseLayout(st.Pin.Layout)
	if err != nil {
		return generator.Layout{}, fmt.Errorf("generator %q: the pinned layout %q does not parse: %w", name, st.Pin.Layout, err)
	}
	if want != nil && want.String() != pinned.String() {
		return generator.Layout{}, fmt.Errorf("generator %q is pinned to layout %q; --generator gives %q: refusing (omit the layout to use the pinned one)",
			name, pinned.String(), want.String())
	}
	return pinned, nil
}

// storedLayouts reads the layouts of the generators defined at runtime
// (firn generator create), by name; definitions of other kinds, and the
// records that do not read, are left out.
func storedLayouts(ctx context.Context, defs coordinator.Definitions) (map[string]string, error) {
	out := map[string]string{}
	ds, _, err := coordinator.SplitDefinitions(defs.Definitions(ctx))
	if err != nil {
		return nil, fmt.Errorf("reading the generators' definitions: %w", err)
	}
	for _, d := range ds {
		if l, err := generator.ParseLayout(d.Definition); err == nil {
			out[d.Name] = l.String()
		}
	}
	return out, nil
}

// generators reads every generator of the cluster, by name.
func generators(ctx context.Context, coord coordinator.Admin) (map[string]*coordinator.GeneratorState, []string, error) {
	gs, err := coord.Generators(ctx)
	if err != nil {
		return nil, nil, err
	}
	m := make(map[string]*coordinator.GeneratorState, len(gs))
	names := make([]string, 0, len(gs))
	for i := range gs {
		m[gs[i].Name] = &gs[i]
		names = append(names, gs[i].Name)
	}
	return m, names, nil
}

// markerLine describes a standing restore marker in the layout's units.
func markerLine(ev *coordinator.RestoreEvidence, layout generator.Layout) string {
	if ev.Counter {
		return counterMarkerLine(ev)
	}
	gap := time.Duration(ev.MinBump(max(layout.Units(ev.At), ev.Shown))) * layout.Unit
	shown := "no reservation"
	if ev.Shown >= 0 {
		shown = layout.UnitStart(ev.Shown + 1).UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("RESTORE MARKER: no node acquires for generator %s: node %q (%s) found dc=%d worker=%d reserved until %s, below the %s it had acknowledged (gap %v), at %s; clear it with: firn coordinator bump --generator %s --by D (D at least %v plus the writes the snapshot missed)",
		ev.Generator, ev.Node.Name, ev.Node.Address, ev.Slot.Datacenter, ev.Slot.Worker, shown,
		layout.UnitStart(ev.Acked+1).UTC().Format(time.RFC3339Nano), gap, ev.At.UTC().Format(time.RFC3339),
		ev.Generator, gap)
}

// counterMarkerLine describes a segment generator's restore marker.
func counterMarkerLine(ev *coordinator.RestoreEvidence) string {
	return fmt.Sprintf("RESTORE MARKER: no node claims for segment generator %s: node %q (%s) found the counter's history without a write it saw (it saw next %d, the coordinator showed %d), at %s; clear it with: firn coordinator bump --generator %s --ids N (N at least %d plus the IDs claimed between the snapshot and the restore)",
		ev.Generator, ev.Node.Name, ev.Node.Address, ev.Acked, ev.Shown, ev.At.UTC().Format(time.RFC3339), ev.Generator, ev.Gap())
}

func cmdWorkers(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("firn workers", `Usage: firn workers [flags]            list worker IDs: holder, heartbeat age, reservation
       firn workers release W [flags]  free worker W (fenced; its reservation is kept)

The coordinator flags also come from FIRN_* and the --config file of serve (its other keys are ignored).`, stdout, adminGroups...)
	var c adminFlags
	c.register(fs, "default", "the generator, as NAME (its layout is read from its pin; NAME=LAYOUT is refused when LAYOUT differs from the pin)")
	dc := fs.Uint64("datacenter", 0, "datacenter of the worker to release")
	if err := c.parse(args, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "workers: %v", err)
	}
	release := ""
	switch {
	case fs.Arg(0) == "release" && fs.NArg() != 2:
		return fail(stderr, exitUsage, "workers release: want one worker ID, not %d (firn workers release W [flags])", fs.NArg()-1)
	case fs.Arg(0) == "release":
		release = fs.Arg(1)
	case fs.NArg() > 0:
		return fail(stderr, exitUsage, "workers: unexpected argument %q (firn workers [release W] [flags])", fs.Arg(0))
	}
	name, given := splitGenerator(c.generator)
	if name == "" {
		return fail(stderr, exitUsage, "workers: --generator needs a name")
	}
	if given != "" {
		if _, err := generator.ParseLayout(given); err != nil {
			return fail(stderr, exitUsage, "workers: --generator %s: %v", name, err)
		}
	}
	coord, err := c.open()
	if err != nil {
		return fail(stderr, exitFailure, "workers: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	states, _, err := generators(ctx, coord)
	if err != nil {
		return fail(stderr, exitFailure, "workers: %v", err)
	}
	st := states[name]
	if st != nil && isCounterDef(st.Pin.Layout) {
		// A segment generator has no workers: its counter instead.
		kind := "segment"
		if seq.IsDefinition(st.Pin.Layout) {
			kind = "sequence"
		}
		fmt.Fprintf(stdout, "generator %s is a %s generator (%s): no worker IDs\n", name, kind, st.Pin.Layout)
		if st.Restore != nil {
			fmt.Fprintln(stdout, markerLine(st.Restore, generator.Layout{}))
		}
		return exitOK
	}
	layout, err := pinnedLayout(name, given, st)
	if err != nil {
		return fail(stderr, exitUsage, "workers: %v", err)
	}
	if release != "" {
		w, err := strconv.ParseUint(release, 10, 64)
		if err != nil || w >= layout.WorkerLimit() {
			return fail(stderr, exitUsage, "workers release: %q is not a worker ID in [0, %d)", release, layout.WorkerLimit())
		}
		if *dc >= layout.DatacenterLimit() {
			return fail(stderr, exitUsage, "workers release: --datacenter %d is not a datacenter value of %s in [0, %d)", *dc, layout, layout.DatacenterLimit())
		}
		if err := coord.ForceRelease(ctx, name, coordinator.Slot{Datacenter: *dc, Worker: w}); err != nil {
			return fail(stderr, exitFailure, "workers release: %v", err)
		}
		fmt.Fprintf(stdout, "released generator %s dc=%d worker=%d (reservation kept)\n", name, *dc, w)
		return exitOK
	}
	holders, err := coord.Workers(ctx, name)
	if err != nil {
		return fail(stderr, exitFailure, "workers: %v", err)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DC\tWORKER\tLIVE\tNODE\tADDRESS\tHEARTBEAT AGE\tRESERVED UNTIL")
	live := 0
	for _, h := range holders {
		node, addr, age := "-", "-", "-"
		if h.Live {
			live++
			node, addr = h.Heartbeat.Node.Name, h.Heartbeat.Node.Address
			age = now.Sub(h.Heartbeat.Wall).Round(time.Millisecond).String()
		}
		res := "-"
		if h.Reserved >= 0 {
			res = layout.UnitStart(h.Reserved + 1).UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "%d\t%d\t%v\t%s\t%s\t%s\t%s\n", h.Slot.Datacenter, h.Slot.Worker, h.Live, node, addr, age, res)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d live of %d worker IDs (%s)\n", live, layout.WorkerLimit()*layout.DatacenterLimit(), layout)
	if st != nil && st.Floor >= 0 {
		fmt.Fprintf(stdout, "generator floor (set by coordinator bump): every acquisition starts after %s\n",
			layout.UnitStart(st.Floor+1).UTC().Format(time.RFC3339Nano))
	}
	if st != nil && st.Restore != nil {
		fmt.Fprintln(stdout, markerLine(st.Restore, layout))
	}
	return exitOK
}

// bumpTarget is one generator a bump raises: a snowflake generator's
// layout, or a segment generator's definition (segment set).
type bumpTarget struct {
	name    string
	layout  generator.Layout
	segment *segment.Definition
	state   *coordinator.GeneratorState
}

// isCounterDef reports whether s names a kind kept on a counter in the
// coordinator: a segment generator's definition or a sequence generator's.
func isCounterDef(s string) bool { return segment.IsDefinition(s) || seq.IsDefinition(s) }

// parseCounterDef reads a segment or sequence definition as the counter's
// definition.
func parseCounterDef(s string) (segment.Definition, error) {
	if seq.IsDefinition(s) {
		d, err := seq.ParseDefinition(s)
		return d.Counter(), err
	}
	return segment.ParseDefinition(s)
}

// pinnedDefinition is the definition of segment generator name, from its
// pin (nil: the pin is not a segment generator's, or there is none). A
// definition given on the command line must be the same.
func pinnedDefinition(name, given string, st *coordinator.GeneratorState) (*segment.Definition, error) {
	if st == nil || !isCounterDef(st.Pin.Layout) {
		if isCounterDef(given) {
			return nil, fmt.Errorf("generator %q has no segment counter in the coordinator to bump", name)
		}
		return nil, nil
	}
	d, err := parseCounterDef(st.Pin.Layout)
	if err != nil {
		return nil, fmt.Errorf("generator %q: the pinned definition %q does not parse: %w", name, st.Pin.Layout, err)
	}
	if given != "" {
		g, err := parseCounterDef(given)
		if err != nil || g != d {
			return nil, fmt.Errorf("generator %q is pinned to %q; --generator gives %q: refusing (omit the definition to use the pinned one)", name, d, given)
		}
	}
	return &d, nil
}

func cmdCoordinator(args []string, stdout, stderr io.Writer) int {
	const bumpUsage = `Usage: firn coordinator bump (--by D | --ids N) [--generator NAME] [flags]

After restoring the coordinator from a snapshot: raises every reservation (snowflake generators, --by)
or counter (segment and sequence generators, --ids) above what was issued before the restore, and
clears the restore markers. The coordinator flags also come from FIRN_* and the --config file of serve.`
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprintln(stdout, bumpUsage)
		return exitOK
	}
	if len(args) == 0 || args[0] != "bump" {
		return fail(stderr, exitUsage, "coordinator: want \"firn coordinator bump --by D [--generator NAME]\"")
	}
	fs := newFlagSet("firn coordinator bump", bumpUsage, stdout, adminGroups...)
	var c adminFlags
	c.register(fs, "", "the generator to bump, as NAME (default: every generator of the cluster); its layout, which gives the time unit and the layout's end, is read from its pin; NAME=LAYOUT is refused when LAYOUT differs from the pin and is needed only for a generator the coordinator has no pin for")
	ids := fs.Uint64("ids", 0, "for segment generators: raise the counter by this many IDs, above every ID issued before the restore (at least the IDs claimed between the snapshot and the restore: the restore marker says what the noticing node saw); the free ranges are dropped. For sequence generators: raise every section's persisted maximum by this much (at least what any key advanced between the snapshot and the restore)")
	by := fs.Duration("by", 0, "for snowflake generators, after restoring the coordinator from a snapshot: raise every reservation of the generator, and the floor of every worker first used later, by this much (at least the time between the snapshot and the last write before the restore, plus the reservation window; at least the gap a restore marker recorded)")
	maxLead := fs.Duration("max-lead", 0, "the nodes' --max-lead, to say when they serve again and how far ahead a busy node reserves (0: max(1s, 2 units) per generator)")
	maxSkew := fs.Duration("max-skew", core.DefaultConfig().MaxPeerSkew, "how far the nodes' clocks may stand ahead of this one (the default is the nodes' default --max-peer-skew): a reservation beyond this clock plus the reservation window, max-lead and this was written by a clock ahead, and the bump refuses, naming the worker and its node, unless --include-ahead")
	includeAhead := fs.Bool("include-ahead", false, "bump also over reservations ahead of this clock (see --max-skew): the generator floor then follows them, and every node of the generator waits for it")
	if err := c.parse(args[1:], os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "coordinator bump: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "coordinator bump: %v", unexpectedArg(fs, 0))
	}
	if *by < 0 {
		return fail(stderr, exitUsage, "coordinator bump: --by %v must be positive", *by)
	}
	if *ids > segment.MaxID {
		// Next never passes MaxID+1 and a section maximum never passes
		// MaxID: a larger bump raises nothing more, and only brings the
		// counter's seq nearer its end.
		return fail(stderr, exitUsage, "coordinator bump: --ids %d is past %d, the largest ID (a bump that large raises nothing more)", *ids, segment.MaxID)
	}
	if *by == 0 && *ids == 0 {
		return fail(stderr, exitUsage, "coordinator bump: want --by D (snowflake generators) or --ids N (segment and sequence generators)")
	}
	if *maxSkew < 0 {
		return fail(stderr, exitUsage, "coordinator bump: --max-skew %v must not be negative", *maxSkew)
	}
	name, given := splitGenerator(c.generator)
	if name == "" && given != "" {
		return fail(stderr, exitUsage, "coordinator bump: --generator %q needs a name", c.generator)
	}
	if given != "" && !isCounterDef(given) {
		if _, err := generator.ParseLayout(given); err != nil {
			return fail(stderr, exitUsage, "coordinator bump: --generator %s: %v", name, err)
		}
	}
	coord, err := c.open()
	if err != nil {
		return fail(stderr, exitFailure, "coordinator bump: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	states, all, err := generators(ctx, coord)
	if err != nil {
		return fail(stderr, exitFailure, "coordinator bump: %v", err)
	}
	names := all
	if name != "" {
		names = []string{name}
	} else if len(names) == 0 {
		return fail(stderr, exitFailure, "coordinator bump: cluster %q has no generators; name one with --generator NAME=LAYOUT", c.coord.Cluster)
	}
	// Every layout is resolved before anything is written.
	var targets []bumpTarget
	var stored map[string]string // layouts of the generators defined at runtime, read when needed
	for _, n := range names {
		d, err := pinnedDefinition(n, given, states[n])
		if err != nil {
			return fail(stderr, exitUsage, "coordinator bump: %v; nothing was bumped", err)
		}
		if d != nil {
			if *ids == 0 {
				return fail(stderr, exitUsage, "coordinator bump: generator %s is kept on a counter (%s): give --ids N, the IDs to raise its counter by; nothing was bumped", n, d)
			}
			targets = append(targets, bumpTarget{name: n, segment: d, state: states[n]})
			continue
		}
		g := given
		if g == "" && (states[n] == nil || states[n].Pin.Layout == "") {
			// No node has pinned it yet (one created with --above has a
			// floor and no pin): the layout its definition stores, which
			// the first node to serve it must pin.
			if stored == nil {
				if stored, err = storedLayouts(ctx, coord); err != nil {
					return fail(stderr, exitFailure, "coordinator bump: generator %s has no pin: %v; nothing was bumped", n, err)
				}
			}
			g = stored[n]
		}
		l, err := pinnedLayout(n, g, states[n])
		if err != nil {
			return fail(stderr, exitUsage, "coordinator bump: %v; nothing was bumped", err)
		}
		if *by == 0 {
			return fail(stderr, exitUsage, "coordinator bump: generator %s is a snowflake generator (%s): give --by D; nothing was bumped", n, l)
		}
		targets = append(targets, bumpTarget{name: n, layout: l, state: states[n]})
	}
	wall, _ := clockguard.NewSystem().Now()
	br := bumpRun{by: *by, ids: *ids, maxLead: *maxLead, maxSkew: *maxSkew, includeAhead: *includeAhead,
		wall: wall, window: c.coord.timing().ReservationWindow, stdout: stdout, stderr: stderr}
	// Reservations ahead of this clock are looked for in every generator
	// before any is bumped, so that a refusal leaves all of them as they
	// were; each backend's Bump checks again on the reading it bumps from.
	if refused, err := br.checkAhead(ctx, coord, targets); err != nil {
		return fail(stderr, exitFailure, "coordinator bump: %v; nothing was bumped", err)
	} else if refused > 0 {
		return exitFailure
	}
	if br.bumpAll(ctx, coord, targets) > 0 {
		return exitFailure
	}
	return exitOK
}

// bumpRun is one `firn coordinator bump`: its flags, this clock's reading
// and the reservation window, and where it reports.
type bumpRun struct {
	by, maxLead, maxSkew time.Duration
	ids                  uint64
	includeAhead         bool
	wall                 time.Time
	window               time.Duration
	stdout, stderr       io.Writer
}

// lead is the nodes' max-lead for layout l: --max-lead, or the default.
func (br *bumpRun) lead(l generator.Layout) time.Duration {
	if br.maxLead > 0 {
		return br.maxLead
	}
	return generator.DefaultMaxLead(l)
}

// spec is the bump of target tg.
func (br *bumpRun) spec(tg bumpTarget) coordinator.BumpSpec {
	l := tg.layout
	ahead := br.window + br.lead(l) + br.maxSkew
	return coordinator.BumpSpec{Generator: tg.name, By: int64((br.by + l.Unit - 1) / l.Unit), Now: max(0, l.Units(br.wall)),
		MaxTime: l.MaxTime(), MaxAhead: int64((ahead+l.Unit-1)/l.Unit) + 1, IncludeAhead: br.includeAhead}
}

// refuseAhead says why tg is not bumped: reservations ahead of this clock.
func (br *bumpRun) refuseAhead(tg bumpTarget, ae *coordinator.AheadError) {
	fmt.Fprintln(br.stderr, aheadMessage(tg.name, tg.layout, ae, br.wall, br.window, br.lead(tg.layout), br.maxSkew))
}

// checkAhead looks for reservations ahead of this clock in every target
// and counts the targets refused for them (none under --include-ahead,
// which says which it includes).
func (br *bumpRun) checkAhead(ctx context.Context, coord coordinator.Admin, targets []bumpTarget) (refused int, err error) {
	for _, tg := range targets {
		if tg.segment != nil {
			continue // a counter has no reservations ahead of a clock
		}
		holders, err := coord.Workers(ctx, tg.name)
		if err != nil {
			return refused, fmt.Errorf("generator %s: %w", tg.name, err)
		}
		check := br.spec(tg)
		check.IncludeAhead = false
		floor := int64(-1)
		if tg.state != nil {
			floor = tg.state.Floor
		}
		var ae *coordinator.AheadError
		if !errors.As(check.CheckAhead(holders, floor), &ae) {
			continue
		}
		if !br.includeAhead {
			br.refuseAhead(tg, ae)
			refused++
			continue
		}
		for _, h := range ae.Ahead {
			fmt.Fprintf(br.stdout, "generator %s: including dc=%d worker=%d reserved until %s, %v ahead of this clock, %s (--include-ahead): the floor follows it\n",
				tg.name, h.Slot.Datacenter, h.Slot.Worker, tg.layout.UnitStart(h.Reserved+1).UTC().Format(time.RFC3339Nano),
				tg.layout.UnitStart(h.Reserved+1).Sub(br.wall).Round(time.Second), h.HolderName())
		}
	}
	return refused, nil
}

// bumpAll bumps every target, reporting each, and counts the failures.
func (br *bumpRun) bumpAll(ctx context.Context, coord coordinator.Backend, targets []bumpTarget) (failed int) {
	for _, tg := range targets {
		if tg.segment != nil {
			if !br.bumpCounter(ctx, coord, tg) {
				failed++
			}
			continue
		}
		l := tg.layout
		spec := br.spec(tg)
		res, err := coord.Bump(ctx, spec)
		var ae *coordinator.AheadError
		if errors.As(err, &ae) {
			failed++
			br.refuseAhead(tg, ae)
			continue
		}
		if err != nil {
			failed++
			msg := err.Error()
			if tg.state != nil && tg.state.Restore != nil && errors.Is(err, coordinator.ErrInvalidSpec) {
				msg += fmt.Sprintf(" (in this layout: at least %v)", time.Duration(tg.state.Restore.MinBump(max(0, l.Units(br.wall), tg.state.Restore.Shown)))*l.Unit)
			}
			fmt.Fprintf(br.stderr, "firn: coordinator bump: generator %s: %s\n", tg.name, strings.ReplaceAll(msg, "\n", " "))
			continue
		}
		lead := br.lead(l)
		serveAt := l.UnitStart(res.Floor).Add(-lead)
		wait := max(0, serveAt.Sub(br.wall)).Round(time.Second)
		fmt.Fprintf(br.stdout, "generator %s: raised every reservation by %v (%d units of %v) and the floor to %d (%s); nodes serve again from about %s, in %v (D plus the reservation window, less max-lead %v)\n",
			tg.name, br.by, spec.By, l.Unit, res.Floor, l.UnitStart(res.Floor).UTC().Format(time.RFC3339Nano),
			serveAt.UTC().Format(time.RFC3339), wait, lead)
		if res.Cleared != nil {
			fmt.Fprintf(br.stdout, "generator %s: cleared the restore marker (node %q found dc=%d worker=%d %v below what it had acknowledged)\n",
				tg.name, res.Cleared.Node.Name, res.Cleared.Slot.Datacenter, res.Cleared.Slot.Worker,
				time.Duration(res.Cleared.MinBump(max(l.Units(res.Cleared.At), res.Cleared.Shown)))*l.Unit)
		}
	}
	return failed
}

// bumpCounter bumps segment generator tg's counter by --ids, reporting
// it; false when it failed.
func (br *bumpRun) bumpCounter(ctx context.Context, coord coordinator.Counters, tg bumpTarget) bool {
	res, err := coord.BumpCounter(ctx, coordinator.CounterSpec{Generator: tg.name, Definition: *tg.segment}, br.ids)
	if err != nil {
		fmt.Fprintf(br.stderr, "firn: coordinator bump: generator %s: %s\n", tg.name, strings.ReplaceAll(err.Error(), "\n", " "))
		return false
	}
	if tg.segment.IsSeq() {
		hi := uint64(0)
		for _, v := range res.After.Sec {
			hi = max(hi, v)
		}
		fmt.Fprintf(br.stdout, "generator %s: raised every section's persisted maximum by %d (the highest now %d); each section's next owner starts its keys above it\n",
			tg.name, br.ids, hi)
	} else {
		fmt.Fprintf(br.stdout, "generator %s: raised the counter by %d IDs (next %d -> %d), dropped %d free IDs; nodes claim again at once, from %d\n",
			tg.name, br.ids, res.Before.Next, res.After.Next, res.Dropped, res.After.Next)
	}
	if !tg.segment.IsSeq() && res.After.Next > tg.segment.Max {
		fmt.Fprintf(br.stdout, "generator %s: the counter is past max=%d: the generator is used up\n", tg.name, tg.segment.Max)
	}
	if ev := res.Cleared; ev != nil {
		// A bump that leaves next below what the node saw is refused before
		// it writes (coordinator.CounterMinBump).
		fmt.Fprintf(br.stdout, "generator %s: cleared the restore marker (node %q saw the counter at next %d; the coordinator showed %d)\n",
			tg.name, ev.Node.Name, ev.Acked, ev.Shown)
	}
	return true
}

// aheadMessage is a bump's refusal over reservations ahead of its clock:
// each worker, its node, its reservation's time and the limit, and how to
// proceed.
func aheadMessage(name string, l generator.Layout, ae *coordinator.AheadError, wall time.Time, window, lead, skew time.Duration) string {
	ts := func(u int64) string { return l.UnitStart(u + 1).UTC().Format(time.RFC3339Nano) }
	var b strings.Builder
	limit := fmt.Sprintf("this clock %s + the reservation window %v + max-lead %v + --max-skew %v",
		wall.UTC().Format(time.RFC3339Nano), window, lead, skew)
	if ae.Floor >= ae.Limit {
		limit = "the generator floor an earlier bump set"
	}
	fmt.Fprintf(&b, "firn: coordinator bump: generator %s: refused, nothing was written: %d worker(s) reserved beyond this clock plus what a node reserves ahead of its own (limit %s: %s); a clock ahead of this one wrote them:\n",
		name, len(ae.Ahead), ts(ae.Limit), limit)
	top := ae.Limit
	for _, h := range ae.Ahead {
		top = max(top, h.Reserved)
		fmt.Fprintf(&b, "  dc=%d worker=%d reserved until %s, %v ahead of this clock, %s\n", h.Slot.Datacenter, h.Slot.Worker,
			ts(h.Reserved), l.UnitStart(h.Reserved+1).Sub(wall).Round(time.Second), h.HolderName())
	}
	within := l.UnitStart(top - ae.MaxAhead) // when this clock plus the allowance reaches them
	fmt.Fprintf(&b, "A bump now sets the generator floor above them, and every node of generator %s would wait until then to serve. Check the clock of the node named (firn info --addr on it; chronyc tracking on its host). To proceed: wait until %s (in %v), when they lie within the limit, and bump again; or bump now with --include-ahead.",
		name, within.UTC().Format(time.RFC3339), max(0, within.Sub(wall)).Round(time.Second))
	return b.String()
}

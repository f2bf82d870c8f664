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

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/server/core"
)

// nodesFollow says what the cluster's nodes do with the definitions,
// wherever one is created or retired.
const nodesFollow = `Every node of the cluster reads the definitions every 2 s, without a restart:
a created generator starts on each node (it serves once its worker is
taken: on a shared coordinator after the restore guard, about 8 s with the
default flags), --allow is enforced, and a retired generator stops: its
calls are refused NOT_FOUND naming the retirement and its workers are
released. A node's --generator NAME=DEFINITION is the static way; it must
name the stored definition, or the node does not start.`

const generatorUsage = `Usage: firn generator create NAME DEFINITION [--allow NAME,...] [--above ID] [flags]
       firn generator list [flags]
       firn generator describe NAME [flags]
       firn generator retire NAME [--reason TEXT] [flags]

Generators defined in the coordinator: a definition is stored once, for the
whole cluster, and kept (a retired one too: its name is never reused for
another ID space). The coordinator flags also come from FIRN_* and the
--config file of serve (its other keys are ignored).

` + nodesFollow + `

Run "firn generator COMMAND --help" for a command's flags.`

func cmdGenerator(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return fail(stderr, exitUsage, "generator: want create, list, describe or retire (firn generator --help)")
	}
	switch args[0] {
	case "--help", "-h":
		fmt.Fprintln(stdout, generatorUsage)
		return exitOK
	case "create":
		return cmdGeneratorCreate(args[1:], stdout, stderr)
	case "list":
		return cmdGeneratorList(args[1:], stdout, stderr)
	case "describe":
		return cmdGeneratorDescribe(args[1:], stdout, stderr)
	case "retire":
		return cmdGeneratorRetire(args[1:], stdout, stderr)
	}
	return fail(stderr, exitUsage, "generator: unknown command %q: want create, list, describe or retire (firn generator --help)", args[0])
}

// generatorCmd is one `firn generator` subcommand's flags and
// positional arguments.
type generatorCmd struct {
	adminFlags
	name string // "generator create"
}

// parse parses args and checks the count of positional arguments.
func (g *generatorCmd) parse(args []string, want int, form string, stderr io.Writer) (int, bool) {
	if err := g.adminFlags.parse(args, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK, false
		}
		return fail(stderr, exitUsage, "%s: %v", g.name, err), false
	}
	if n := g.fs.NArg(); n > want {
		return fail(stderr, exitUsage, "%s: %v", g.name, unexpectedArg(g.fs, want)), false
	} else if n < want {
		return fail(stderr, exitUsage, "%s: want %s", g.name, form), false
	}
	return 0, true
}

// checkName refuses a generator name that --generator would refuse.
func checkName(cmd, name string, stderr io.Writer) (int, bool) {
	if !validGeneratorName(name) {
		return fail(stderr, exitUsage, "%s: generator name %q must be %s", cmd, name, generatorNameRule), false
	}
	return 0, true
}

func cmdGeneratorCreate(args []string, stdout, stderr io.Writer) int {
	const form = "firn generator create NAME DEFINITION [--allow NAME,...] [--above ID]"
	usage := "Usage: " + form + ` [flags]

Stores the definition of generator NAME in the coordinator: DEFINITION is what
--generator NAME=DEFINITION takes (a layout preset or canonical layout,
segment[,start=N][,max=M], or seq[,sections=S]), stored in canonical form. A
name already defined (serving or retired) is refused, and so is a layout that
differs from the one a node already pinned for NAME.

--above ID, to continue above an old fleet (docs/migrate.md): for a layout, ID
is decoded under that layout and the generator floor is set above its time
before the definition is stored, so every node's first ID lies above ID with
no wait once that time is past; refused when ID does not decode under the
layout, when its time is in the future (a different layout, or a clock
ahead), or when NAME already serves (firn coordinator bump is the tool then).
For a segment, the first ID (start) is set to ID+1, or a given start at or
below ID is refused. A seq generator has no use for it.

` + nodesFollow
	fs := newFlagSet("firn generator create", usage, stdout, adminGroups...)
	g := generatorCmd{name: "generator create"}
	var allow []string
	fs.Var(listFlag{&allow, rawItems}, "allow", "caller names (mTLS certificate CN or DNS SAN) that may draw from the generator, a list (default: every caller)")
	above := fs.String("above", "", "an ID the old fleet issued (the largest): every ID of this generator lies above it")
	g.registerCoord(fs)
	if code, ok := g.parse(args, 2, form, stderr); !ok {
		return code
	}
	name, def := fs.Arg(0), fs.Arg(1)
	if code, ok := checkName(g.name, name, stderr); !ok {
		return code
	}
	gc, err := parseGeneratorDef(name, def)
	if err != nil {
		return fail(stderr, exitUsage, "generator create: DEFINITION %q: %v", def, err)
	}
	wall, _ := clockguard.NewSystem().Now()
	if gc.Segment == nil {
		// As a node checks it at start (core.Config.Finish).
		if err := gc.Layout.Validate(wall); err != nil {
			return fail(stderr, exitUsage, "generator create: DEFINITION %q: %v", def, err)
		}
	}
	if err := checkAllow(allow); err != nil {
		return fail(stderr, exitUsage, "generator create: %v", err)
	}
	d := coordinator.GeneratorDefinition{Name: name, Allow: allow, Created: wall.UTC()}
	var mig *migration
	if *above != "" {
		if mig, err = planAbove(&gc, def, *above, wall); err != nil {
			return fail(stderr, exitUsage, "generator create: %v", err)
		}
		d.Above = strconv.FormatUint(mig.id, 10)
	}
	d.Definition = gc.Spec()
	if err := d.Validate(); err != nil {
		return fail(stderr, exitUsage, "generator create: %v", err)
	}

	coord, err := g.open()
	if err != nil {
		return fail(stderr, exitFailure, "generator create: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := checkCreate(ctx, coord, gc, mig, g.coord.Cluster); err != nil {
		return fail(stderr, exitFailure, "generator create: %v; nothing was written", err)
	}
	if mig != nil && mig.floor >= 0 {
		if err := mig.writeFloor(ctx, coord, gc); err != nil {
			return fail(stderr, exitFailure, "generator create: %v", err)
		}
	}
	if err := coord.CreateDefinition(ctx, d); err != nil {
		var ex *coordinator.DefinitionExistsError
		if errors.As(err, &ex) {
			return fail(stderr, exitFailure, "generator create: %s", existsLine(ex.Existing))
		}
		return fail(stderr, exitFailure, "generator create: %v", err)
	}
	fmt.Fprintf(stdout, "generator %s defined: %s (%s)\n", name, d.Definition, gc.Kind())
	if len(allow) > 0 {
		fmt.Fprintf(stdout, "callers allowed: %s\n", strings.Join(allow, ", "))
	}
	if mig != nil {
		fmt.Fprintln(stdout, mig.report(gc, wall))
	}
	fmt.Fprintf(stdout, "the cluster's nodes start it within 2 s (the static way, on a node's flags: --generator %s=%s)\n", name, d.Definition)
	return exitOK
}

// rawItems splits a list value at its commas, keeping empty items, so
// that checkAllow can refuse them.
func rawItems(s string) ([]string, error) {
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items, nil
}

// checkAllow refuses an --allow list with an empty name or a name twice.
func checkAllow(allow []string) error {
	seen := map[string]bool{}
	for _, a := range allow {
		switch {
		case a == "":
			return flagErr("allow", "an empty caller name (names are separated by commas, none empty)")
		case len(a) > 255:
			return flagErr("allow", "caller name %.20q... is %d bytes, at most 255", a, len(a))
		case seen[a]:
			return flagErr("allow", "caller name %q given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// migration is what --above makes of a create: for a layout, the
// generator floor to write before the definition (floor >= 0), with the
// decoded ID; for a segment, the start it set.
type migration struct {
	id    uint64
	parts generator.Parts // the ID decoded (layouts)
	floor int64           // the generator floor in units; -1: none (segment)
}

// aboveTolerance is how far in the future an --above ID's time may lie
// (the old fleet's clock a little ahead of this one).
const aboveTolerance = time.Second

// planAbove checks --above ID against the definition gc and fills it in:
// for a layout, the floor above ID's decoded time; for a segment, the
// start above ID (set, or a given one checked). Refusals name why.
func planAbove(gc *core.GeneratorConfig, def, above string, now time.Time) (*migration, error) {
	id, err := strconv.ParseUint(above, 10, 64)
	if err != nil {
		return nil, flagErr("above", "%q is not a decimal ID in [0, %d]", above, uint64(1<<64-1))
	}
	switch gc.Kind() {
	case segment.SeqKind:
		return nil, flagErr("above", "a seq generator numbers each key from 1 on its own: no ID of an old fleet can be above or below it (leave --above out)")
	case segment.Kind:
		d := *gc.Segment
		switch {
		case id >= d.Max-1:
			return nil, flagErr("above", "%d: the first ID above it would not lie below the definition's max=%d", id, d.Max)
		case startGiven(def) && d.Start <= id:
			return nil, flagErr("above", "the definition's start=%d is at or below ID %d: give start above it, or leave start out (then start=%d)", d.Start, id, id+1)
		case !startGiven(def):
			d.Start = id + 1
		}
		if err := d.Validate(); err != nil {
			return nil, flagErr("above", "%v", err)
		}
		gc.Segment = &d
		return &migration{id: id, floor: -1}, nil
	}
	l := gc.Layout
	parts, err := l.Decode(id)
	if err != nil {
		return nil, flagErr("above", "%d does not decode under %s (%v): it was not made with this layout, whose IDs are at most %d bits", id, l, err, l.TotalBits())
	}
	if limit := now.Add(aboveTolerance); parts.Time.After(limit) {
		return nil, flagErr("above", "%d decodes under %s to time %s, %v after this clock (%s, tolerance %v): an ID from the future; it was made with another layout (another epoch, unit or field widths), or by a clock far ahead",
			id, l, parts.Time.UTC().Format(time.RFC3339Nano), parts.Time.Sub(now).Round(time.Millisecond), now.UTC().Format(time.RFC3339Nano), aboveTolerance)
	}
	if parts.Units+1 >= l.MaxTime() {
		return nil, flagErr("above", "%d decodes to time unit %d, the layout's last is %d: no ID above it", id, parts.Units, l.MaxTime())
	}
	// The floor on the time is a floor on the number only while the time
	// field lies above every other field: then the smallest ID of any
	// later unit is above the largest of ID's unit. Every firn layout is
	// built so (generator.Layout); the proof checks it on this one.
	lo, errLo := l.Encode(parts.Units+1, 0, 0, 0)
	hi, errHi := l.Encode(parts.Units, l.DatacenterLimit()-1, l.WorkerLimit()-1, l.MaxSequence())
	if errLo != nil || errHi != nil || lo <= hi {
		return nil, flagErr("above", "layout %s does not keep the time field on top (IDs of unit %d reach %d, the next unit starts at %d): a later time is not a larger ID, so no floor can put every ID above %d",
			l, parts.Units, hi, lo, id)
	}
	return &migration{id: id, parts: parts, floor: parts.Units + 1}, nil
}

// startGiven reports whether segment definition def names its start.
func startGiven(def string) bool {
	for _, part := range strings.Split(def, ",")[1:] {
		if k, _, _ := strings.Cut(part, "="); strings.TrimSpace(k) == "start" {
			return true
		}
	}
	return false
}

// checkCreate refuses, before anything is written, a create the
// coordinator's state contradicts: a name already defined, a layout or
// definition other than the one pinned for it, and with --above a name
// that serves already (a pin, or workers with reservations).
func checkCreate(ctx context.Context, coord coordinator.Backend, gc core.GeneratorConfig, mig *migration, cluster string) error {
	ds, err := coord.Definitions(ctx)
	defs, unreadable, err := coordinator.SplitDefinitions(ds, err)
	if err != nil {
		return err
	}
	for _, d := range defs {
		if d.Name == gc.Name {
			return errors.New(existsLine(d))
		}
	}
	for _, u := range unreadable {
		if u.Name == gc.Name {
			return fmt.Errorf("generator %q is already defined, in a record this binary cannot read (%v): a generator keeps one definition for life (choose another name)", gc.Name, u.Err)
		}
	}
	states, _, err := generators(ctx, coord)
	if err != nil {
		return err
	}
	st := states[gc.Name]
	if st != nil && st.Pin.Layout != "" && st.Pin.Layout != gc.Spec() {
		return fmt.Errorf("generator %q is pinned to %q by the nodes that served it; the definition is %q: a generator keeps one definition for life (choose another name)",
			gc.Name, st.Pin.Layout, gc.Spec())
	}
	if mig == nil {
		return nil
	}
	bump := "firn coordinator bump --generator " + gc.Name
	if gc.Segment != nil {
		bump += " --ids N"
	} else {
		bump += " --by D"
	}
	if st != nil && st.Pin.Layout != "" {
		return fmt.Errorf("--above: generator %q already serves in cluster %q (pinned to %s): its IDs may lie anywhere up to now; to move it above an ID, %s is the tool", gc.Name, cluster, st.Pin.Layout, bump)
	}
	if gc.Segment != nil {
		return nil
	}
	holders, err := coord.Workers(ctx, gc.Name)
	if err != nil {
		return err
	}
	if len(holders) > 0 {
		return fmt.Errorf("--above: generator %q already has %d worker(s) with a reservation or an owner in cluster %q: it serves; %s is the tool", gc.Name, len(holders), cluster, bump)
	}
	return nil
}

// existsLine describes a definition that stands already.
func existsLine(d coordinator.GeneratorDefinition) string {
	return fmt.Sprintf("generator %q is already defined as %s (created %s, %s): a name is defined once, for life (firn generator describe %s)",
		d.Name, d.Definition, d.Created.UTC().Format(time.RFC3339), stateWord(d), d.Name)
}

// stateWord is "serving" or "retired at T: why".
func stateWord(d coordinator.GeneratorDefinition) string {
	if !d.IsRetired() {
		return "serving"
	}
	s := "retired at " + d.Retired.UTC().Format(time.RFC3339)
	if d.RetiredWhy != "" {
		s += ": " + d.RetiredWhy
	}
	return s
}

// writeFloor sets the generator floor of gc to m.floor: a bump by one
// unit over time floor-1 of a generator with no reservation writes the
// floor alone (and never lowers one standing). Then it checks that no
// node took a worker of the generator meanwhile (between checkCreate and
// here): one that took it before the floor was written started above
// its own clock only, which this command cannot check.
func (m *migration) writeFloor(ctx context.Context, coord coordinator.Backend, gc core.GeneratorConfig) error {
	l := gc.Layout
	res, err := coord.Bump(ctx, coordinator.BumpSpec{Generator: gc.Name, By: 1, Now: m.floor - 1, MaxTime: l.MaxTime()})
	if err != nil {
		return fmt.Errorf("writing the generator floor: %w; the definition was not stored", err)
	}
	if res.Floor < m.floor {
		return fmt.Errorf("the generator floor reads %d after %d was written; the definition was not stored", res.Floor, m.floor)
	}
	holders, err := coord.Workers(ctx, gc.Name)
	if err != nil {
		return fmt.Errorf("checking the workers after writing the floor: %w; the definition was not stored", err)
	}
	if len(holders) > 0 {
		h := holders[0]
		return fmt.Errorf("a node took dc=%d worker=%d of generator %q (%s) while the floor was being written: whether its first IDs lie above %d cannot be proven here; the definition was not stored: stop the nodes of %s, then firn coordinator bump --generator %s --by D (D covering the old fleet's IDs)",
			h.Slot.Datacenter, h.Slot.Worker, gc.Name, h.HolderName(), m.id, gc.Name, gc.Name)
	}
	m.floor = res.Floor
	return nil
}

// report says what --above did.
func (m *migration) report(gc core.GeneratorConfig, now time.Time) string {
	if gc.Segment != nil {
		return fmt.Sprintf("above %d: the first ID is %d (start)", m.id, gc.Segment.Start)
	}
	l := gc.Layout
	first := l.UnitStart(m.floor + 1)
	wait := "no wait: it is past"
	if d := first.Sub(now); d > 0 {
		wait = fmt.Sprintf("nodes serve it from %s, in %v", first.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond))
	}
	return fmt.Sprintf("above %d (time %s, dc=%d worker=%d seq=%d under %s): generator floor %d written before the definition; every node's first ID has time %s or later (%s)",
		m.id, m.parts.Time.UTC().Format(time.RFC3339Nano), m.parts.Datacenter, m.parts.Worker, m.parts.Sequence, l,
		m.floor, first.UTC().Format(time.RFC3339Nano), wait)
}

func cmdGeneratorList(args []string, stdout, stderr io.Writer) int {
	const form = "firn generator list"
	fs := newFlagSet("firn generator list", "Usage: "+form+` [flags]

Lists the generators defined in the coordinator: name, definition, the callers
allowed, and whether each serves or was retired (and when).`, stdout, adminGroups...)
	g := generatorCmd{name: "generator list"}
	g.registerCoord(fs)
	if code, ok := g.parse(args, 0, form, stderr); !ok {
		return code
	}
	coord, err := g.open()
	if err != nil {
		return fail(stderr, exitFailure, "generator list: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := coord.Definitions(ctx)
	defs, unreadable, err := coordinator.SplitDefinitions(ds, err)
	if err != nil {
		return fail(stderr, exitFailure, "generator list: %v", err)
	}
	if len(defs) == 0 && len(unreadable) == 0 {
		fmt.Fprintf(stdout, "no generators defined in cluster %q (firn generator create NAME DEFINITION)\n", g.coord.Cluster)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDEFINITION\tALLOW\tSTATE")
	for _, d := range defs {
		allow := "(every caller)"
		if len(d.Allow) > 0 {
			allow = strings.Join(d.Allow, ",")
		}
		state := "serving"
		if d.IsRetired() {
			state = "retired " + d.Retired.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Name, d.Definition, allow, state)
	}
	for _, u := range unreadable {
		fmt.Fprintf(tw, "%s\t?\t?\tunreadable (below)\n", u.Name)
	}
	tw.Flush()
	for _, u := range unreadable {
		fmt.Fprintf(stdout, "%s: %v\n", u.Name, u.Err)
	}
	return exitOK
}

func cmdGeneratorDescribe(args []string, stdout, stderr io.Writer) int {
	const form = "firn generator describe NAME"
	fs := newFlagSet("firn generator describe", "Usage: "+form+` [flags]

Shows generator NAME's definition as stored (definition, callers allowed, the
ID it was created above, when it was created or retired), and its state in the
coordinator: the pin its nodes wrote, the generator floor, a restore marker,
and its worker IDs in use.`, stdout, adminGroups...)
	g := generatorCmd{name: "generator describe"}
	g.registerCoord(fs)
	if code, ok := g.parse(args, 1, form, stderr); !ok {
		return code
	}
	name := fs.Arg(0)
	if code, ok := checkName(g.name, name, stderr); !ok {
		return code
	}
	coord, err := g.open()
	if err != nil {
		return fail(stderr, exitFailure, "generator describe: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := coord.Definitions(ctx)
	defs, unreadable, err := coordinator.SplitDefinitions(ds, err)
	if err != nil {
		return fail(stderr, exitFailure, "generator describe: %v", err)
	}
	var def *coordinator.GeneratorDefinition
	for i := range defs {
		if defs[i].Name == name {
			def = &defs[i]
		}
	}
	var bad *coordinator.UnreadableDefinition
	for i := range unreadable {
		if unreadable[i].Name == name {
			bad = &unreadable[i]
		}
	}
	states, _, err := generators(ctx, coord)
	if err != nil {
		return fail(stderr, exitFailure, "generator describe: %v", err)
	}
	st := states[name]
	if def == nil && bad == nil && st == nil {
		return fail(stderr, exitFailure, "generator describe: no generator %q in cluster %q: neither defined (firn generator list) nor used by a node", name, g.coord.Cluster)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s:\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("generator", "%s", name)
	spec := ""
	switch {
	case bad != nil:
		row("definition", "unreadable: %v (a node does not serve it: neither its retirement nor its allow list can be checked)", bad.Err)
	case def == nil:
		row("definition", "none stored (its nodes serve it from --generator flags)")
	default:
		spec = def.Definition
		row("definition", "%s", def.Definition)
		if len(def.Allow) == 0 {
			row("allow", "every caller")
		} else {
			row("allow", "%s", strings.Join(def.Allow, ", "))
		}
		if def.Above != "" {
			row("above", "%s", def.Above)
		}
		row("created", "%s", def.Created.UTC().Format(time.RFC3339Nano))
		row("state", "%s", stateWord(*def))
	}
	var layout *generator.Layout
	if st != nil && st.Pin.Layout != "" {
		row("pin", "%s (incarnation %s)", st.Pin.Layout, st.Pin.Incarnation)
		spec = st.Pin.Layout
	} else {
		row("pin", "none (no node has served it)")
	}
	if spec != "" && !isCounterDef(spec) {
		if l, err := generator.ParseLayout(spec); err == nil {
			layout = &l
		}
	}
	if st != nil && st.Floor >= 0 {
		if layout != nil {
			row("floor", "%d: every acquisition starts after %s", st.Floor, layout.UnitStart(st.Floor+1).UTC().Format(time.RFC3339Nano))
		} else {
			row("floor", "%d", st.Floor)
		}
	} else {
		row("floor", "none")
	}
	if st != nil && st.Restore != nil {
		l := generator.Layout{}
		if layout != nil {
			l = *layout
		}
		row("restore marker", "%s", markerLine(st.Restore, l))
	}
	switch {
	case spec != "" && isCounterDef(spec):
		row("workers", "none: kept on a counter in the coordinator")
	case layout != nil:
		holders, err := coord.Workers(ctx, name)
		if err != nil {
			tw.Flush()
			return fail(stderr, exitFailure, "generator describe: %v", err)
		}
		live := 0
		for _, h := range holders {
			if h.Live {
				live++
			}
		}
		row("workers", "%d in use (%d live) of %d (firn workers --generator %s)", len(holders), live, layout.WorkerLimit()*layout.DatacenterLimit(), name)
	}
	tw.Flush()
	return exitOK
}

func cmdGeneratorRetire(args []string, stdout, stderr io.Writer) int {
	const form = "firn generator retire NAME [--reason TEXT]"
	fs := newFlagSet("firn generator retire", "Usage: "+form+` [flags]

Marks generator NAME retired in the coordinator, with the reason: its
definition stays, so its name is never defined again for another ID space.
Retiring again keeps the first retirement.

`+nodesFollow, stdout, adminGroups...)
	g := generatorCmd{name: "generator retire"}
	reason := fs.String("reason", "", "why it is retired (shown by list and describe, and named to callers refused)")
	g.registerCoord(fs)
	if code, ok := g.parse(args, 1, form, stderr); !ok {
		return code
	}
	name := fs.Arg(0)
	if code, ok := checkName(g.name, name, stderr); !ok {
		return code
	}
	if len(*reason) > 1024 {
		return fail(stderr, exitUsage, "generator retire: --reason is %d bytes, at most 1024", len(*reason))
	}
	coord, err := g.open()
	if err != nil {
		return fail(stderr, exitFailure, "generator retire: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wall, _ := clockguard.NewSystem().Now()
	d, err := coord.RetireDefinition(ctx, name, *reason, wall)
	if errors.Is(err, coordinator.ErrNoDefinition) {
		return fail(stderr, exitFailure, "generator retire: no generator %q defined in cluster %q (firn generator list)", name, g.coord.Cluster)
	}
	if err != nil {
		return fail(stderr, exitFailure, "generator retire: %v", err)
	}
	if !d.Retired.Equal(wall.UTC()) {
		fmt.Fprintf(stdout, "generator %s was already %s (kept)\n", name, stateWord(d))
		return exitOK
	}
	fmt.Fprintf(stdout, "generator %s %s\n", name, stateWord(d))
	return exitOK
}

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
)

// Every command's flags are a pflag.FlagSet. pflag, rather than the
// standard flag package, because it is what this binary's conventions
// are: it prints and names flags as --flag in help and in every error
// ("unknown flag: --x", "invalid argument "y" for "--max-lead" flag"),
// takes flags after positional arguments and stops at "--", keeps
// single-letter shorthands (firn next -n 3), and tells a flag given from
// one left at its default (Changed). With the standard package each of
// those was code here: an interspersed-argument loop, a quiet parse that
// swallowed the package's own output, a bool flag that recorded being
// set, and its help and errors still said -flag. What pflag does not do
// is group the help; helpGroup and writeHelp do, over its FlagUsages.

// helpGroup is a heading of a command's help and the flags under it.
type helpGroup struct {
	heading string
	flags   []string
}

// testingHeading heads the switches that are for tests or that lift a
// safety rule: never part of an ordinary deployment.
const testingHeading = "Testing and unsafe (fault injection, rules lifted):"

// newFlagSet returns the flag set of a command (name as "firn next").
// Its --help (or -h) writes usage, then the flags: first those of no
// group, under "Flags:" (the essential ones: define them first), then
// each group under its heading. pflag itself writes nothing: a refusal
// comes back from parseFlags for the command to print in one line.
func newFlagSet(name, usage string, stdout io.Writer, groups ...helpGroup) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	fs.Usage = func() { writeHelp(stdout, fs, usage, groups) }
	return fs
}

// writeHelp writes usage and fs's flags, grouped (see newFlagSet). A
// group naming a flag fs does not define is a bug in the command: it
// panics, and every command's --help runs in the tests.
func writeHelp(w io.Writer, fs *pflag.FlagSet, usage string, groups []helpGroup) {
	grouped := map[string]bool{}
	for _, g := range groups {
		for _, n := range g.flags {
			grouped[n] = true
		}
	}
	section := func(heading string, flags []*pflag.Flag) {
		set := pflag.NewFlagSet("", pflag.ContinueOnError)
		set.SortFlags = false
		for _, f := range flags {
			set.AddFlag(f)
		}
		fmt.Fprintf(w, "\n%s\n%s", heading, set.FlagUsagesWrapped(100))
	}
	var essential []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !grouped[f.Name] {
			essential = append(essential, f)
		}
	})
	fmt.Fprint(w, strings.TrimRight(usage, "\n")+"\n")
	section("Flags:", essential)
	for _, g := range groups {
		flags := make([]*pflag.Flag, len(g.flags))
		for i, n := range g.flags {
			if flags[i] = fs.Lookup(n); flags[i] == nil {
				panic(fmt.Sprintf("%s: help group %q names no flag --%s", fs.Name(), g.heading, n))
			}
		}
		section(g.heading, flags)
	}
}

// parseFlags parses args into fs. Flags may follow the positional
// arguments (firn decode ID --layout snowflake); after "--" everything is
// positional; fs.Args() then holds the positional arguments in order. A
// long flag given with one dash (-addr, as the standard flag package
// took it) is refused with the form to use.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(args)
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() != "" {
		name, _, _ := strings.Cut(ne.GetSpecifiedShortnames(), "=")
		if fs.Lookup(name) != nil {
			return fmt.Errorf("unknown flag -%s: a long flag takes two dashes, --%s", name, name)
		}
	}
	return err
}

func isHelp(err error) bool { return errors.Is(err, pflag.ErrHelp) }

// unexpectedArg is the refusal of a positional argument a command does
// not take.
func unexpectedArg(fs *pflag.FlagSet, want int) error {
	return fmt.Errorf("unexpected argument %q (%s takes %d)", fs.Arg(want), fs.Name(), want)
}

// listFlag is a list-valued flag. Every list takes its items the same
// ways: the flag repeated (--etcd a --etcd b), items separated by commas
// in one value (--etcd a,b, FIRN_ETCD=a,b), or a YAML list in the
// --config file (etcd: [a, b]); the items accumulate. split cuts one
// value into items: commaItems, or splitGenerators for --generator, whose
// definitions hold commas of their own.
type listFlag struct {
	v     *[]string
	split func(string) ([]string, error)
}

func (l listFlag) String() string { return strings.Join(*l.v, ",") }
func (l listFlag) Type() string   { return "list" }
func (l listFlag) Set(s string) error {
	items, err := l.split(s)
	if err != nil {
		return err
	}
	*l.v = append(*l.v, items...)
	return nil
}

// isList reports whether f is list-valued.
func isList(f *pflag.Flag) bool {
	_, ok := f.Value.(listFlag)
	return ok
}

// commaItems splits a value at its commas, dropping empty items.
func commaItems(s string) ([]string, error) {
	var items []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			items = append(items, p)
		}
	}
	return items, nil
}

// splitGenerators splits a value of --generator into generators,
// NAME=DEFINITION each, at the commas between them. A definition may
// hold commas of its own (name=segment,start=5; a canonical layout
// time=41,dc=5,...): a part after a comma stays with the definition
// before it, as one of its parameters, unless that definition is a preset
// (which takes none) or the part's value is a definition by itself (a
// preset, segment..., seq..., or key=value) — the next generator. A
// parameter's value never is one: a number, a duration, a time, an order.
func splitGenerators(s string) ([]string, error) {
	if strings.Contains(s, ";") {
		return nil, fmt.Errorf("%q: generators in one value are separated by ',' (';' separates nothing; or repeat the flag)", s)
	}
	var items []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		if n := len(items); n > 0 && continuesDefinition(items[n-1], part) {
			items[n-1] += "," + part
			continue
		}
		items = append(items, part)
	}
	return items, nil
}

// continuesDefinition reports whether part, after a comma, is a parameter
// of the definition of generator item (see splitGenerators).
func continuesDefinition(item, part string) bool {
	isPreset := func(s string) bool { _, ok := generator.Preset(strings.TrimSpace(s)); return ok }
	_, def, _ := strings.Cut(item, "=")
	if isPreset(def) {
		return false
	}
	_, v, ok := strings.Cut(part, "=")
	if !ok {
		return true // not key=value: the definition refuses it, naming it
	}
	return !isPreset(v) && !segment.IsDefinition(v) && !seq.IsDefinition(v) && !strings.Contains(v, "=")
}

package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// layering says which flags of a flag set parseLayered fills from the
// environment and the --config file.
type layering struct {
	// repeatable names flags whose values accumulate; their environment
	// values separate with ';' and their file values are YAML lists.
	repeatable map[string]bool
	// only, when set, names the flags that take environment and file
	// values; the others are command-line only. Nil: every flag.
	only map[string]bool
	// known, when set, names file keys that are accepted and ignored (the
	// serve flags an admin command does not read from a shared --config
	// file). Any other key that is not a layered flag is refused.
	known map[string]bool
}

// parseLayered parses args into fs with the precedence flag > environment
// (FIRN_<FLAG>) > YAML file (--config) > default.
func parseLayered(fs *flag.FlagSet, args []string, configPath *string, ly layering, getenv func(string) string) error {
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	layered := func(name string) bool { return ly.only == nil || ly.only[name] }
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	apply := func(name string, values []string, from string) error {
		for _, v := range values {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("%s=%q: not a valid --%s (%s): %v", from, v, name, fs.Lookup(name).Usage, err)
			}
		}
		return nil
	}
	// The environment.
	fromEnv := map[string]bool{}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil || !layered(f.Name) {
			return
		}
		key := "FIRN_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := getenv(key)
		if v == "" {
			return
		}
		vals := []string{v}
		if ly.repeatable[f.Name] {
			vals = strings.Split(v, ";")
		}
		envErr = apply(f.Name, vals, "environment "+key)
		fromEnv[f.Name] = true
	})
	if envErr != nil {
		return envErr
	}
	// The file.
	if configPath == nil || *configPath == "" {
		return nil
	}
	b, err := os.ReadFile(*configPath)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("--config %s: %w", *configPath, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || !layered(k) || k == "config" {
			if ly.known[k] && k != "config" {
				continue
			}
			return fmt.Errorf("--config %s: unknown key %q (keys are serve flag names, e.g. grpc-addr)", *configPath, k)
		}
		if set[k] || fromEnv[k] {
			continue
		}
		var vals []string
		switch v := m[k].(type) {
		case []any:
			if !ly.repeatable[k] {
				parts := make([]string, len(v))
				for i, x := range v {
					parts[i] = fmt.Sprint(x)
				}
				vals = []string{strings.Join(parts, ",")}
			} else {
				for _, x := range v {
					vals = append(vals, fmt.Sprint(x))
				}
			}
		case nil:
			continue
		case float64:
			if v == float64(int64(v)) {
				vals = []string{fmt.Sprint(int64(v))}
			} else {
				vals = []string{fmt.Sprint(v)}
			}
		default:
			vals = []string{fmt.Sprint(v)}
		}
		if err := apply(k, vals, "--config "+*configPath); err != nil {
			return err
		}
	}
	return nil
}

// listFlag is a comma-separated list flag.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}
func (l listFlag) Set(s string) error {
	*l.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.v = append(*l.v, p)
		}
	}
	return nil
}

// repeatFlag is a repeatable flag.
type repeatFlag struct{ v *[]string }

func (r repeatFlag) String() string {
	if r.v == nil {
		return ""
	}
	return strings.Join(*r.v, ";")
}
func (r repeatFlag) Set(s string) error { *r.v = append(*r.v, s); return nil }

// boolSetFlag records whether a bool flag was given.
type boolSetFlag struct {
	v   *bool
	set *bool
}

func (b boolSetFlag) String() string {
	if b.v == nil {
		return "false"
	}
	return fmt.Sprint(*b.v)
}
func (b boolSetFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		*b.v = true
	case "false", "0", "no":
		*b.v = false
	default:
		return fmt.Errorf("%q is not a boolean", s)
	}
	*b.set = true
	return nil
}
func (b boolSetFlag) IsBoolFlag() bool { return true }

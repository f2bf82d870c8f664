package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// layering says which flags of a flag set parseLayered fills from the
// environment and the --config file.
type layering struct {
	// only, when set, names the flags that take environment and file
	// values; the others are command-line only. Nil: every flag.
	only map[string]bool
	// known, when set, names file keys that are accepted and ignored (the
	// serve flags an admin command does not read from a shared --config
	// file). Any other key that is not a layered flag is refused.
	known map[string]bool
}

// parseLayered parses args into fs with the precedence flag > environment
// (FIRN_<FLAG>) > YAML file (--config) > default. A list-valued flag
// (listFlag) takes the same values from each: FIRN_ETCD=a,b as --etcd a,b,
// and in the file a YAML list or one such value.
func parseLayered(fs *pflag.FlagSet, args []string, configPath *string, ly layering, getenv func(string) string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	layered := func(name string) bool { return ly.only == nil || ly.only[name] }
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })

	apply := func(name string, values []string, from string) error {
		for _, v := range values {
			if err := fs.Set(name, v); err != nil {
				var ive *pflag.InvalidValueError
				if errors.As(err, &ive) {
					err = ive.Unwrap()
				}
				return fmt.Errorf("%s=%q: not a valid --%s (%s): %v", from, v, name, fs.Lookup(name).Usage, err)
			}
		}
		return nil
	}
	// The environment.
	fromEnv := map[string]bool{}
	var envErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if set[f.Name] || envErr != nil || !layered(f.Name) {
			return
		}
		key := "FIRN_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := getenv(key)
		if v == "" {
			return
		}
		envErr = apply(f.Name, []string{v}, "environment "+key)
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
			if !isList(f) {
				return fmt.Errorf("--config %s: key %q takes one value, not a list", *configPath, k)
			}
			for _, x := range v {
				vals = append(vals, fmt.Sprint(x))
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

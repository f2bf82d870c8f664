package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
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
	entries, err := configEntries(b)
	if err != nil {
		return fmt.Errorf("--config %s: %w", *configPath, err)
	}
	for _, e := range entries {
		k := e.key
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
		if e.list && !isList(f) {
			return fmt.Errorf("--config %s: key %q takes one value, not a list", *configPath, k)
		}
		if e.null {
			continue
		}
		if err := apply(k, e.values, "--config "+*configPath); err != nil {
			return err
		}
	}
	return nil
}

// configEntry is one key of a --config file with the values it gives its
// flag, each as the file writes it.
type configEntry struct {
	key    string
	values []string
	list   bool // written as a YAML list
	null   bool // written as null (or left empty): the key gives no value
}

// configEntries reads a --config file's keys in the order written. A
// value is handed to its flag as the file's text (yaml.Node.Value), as the
// command line or the environment would give it, never as a YAML type
// printed back: `cluster: 0123` is the cluster "0123" (not the octal 83),
// `cluster: on` is "on" (not true), a long digit string keeps every digit.
// --cluster names an ID space, so a node configured by file and one by
// flag with the same written value must land in the same one. A key
// written twice is refused naming it (the first value would be dropped
// without a word), and so is a value the flags cannot take: a mapping, a
// list of other than plain values.
func configEntries(b []byte) ([]configEntry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a second YAML document (the file is one mapping of flag names to values)", extra.Line)
	}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = deref(root.Content[0])
	}
	if isNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: not a mapping of flag names to values", root.Line)
	}
	seen := map[string]int{}
	var out []configEntry
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := deref(root.Content[i]), deref(root.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a key that is not a flag name", kn.Line)
		}
		k := kn.Value
		if first, ok := seen[k]; ok {
			return nil, fmt.Errorf("key %q given twice (lines %d and %d): one value each", k, first, kn.Line)
		}
		seen[k] = kn.Line
		e := configEntry{key: k}
		switch {
		case isNull(vn):
			e.null = true
		case vn.Kind == yaml.ScalarNode:
			e.values = []string{vn.Value}
		case vn.Kind == yaml.SequenceNode:
			e.list = true
			for _, item := range vn.Content {
				item = deref(item)
				if item.Kind != yaml.ScalarNode || isNull(item) {
					return nil, fmt.Errorf("key %q, line %d: a list item that is not a plain value", k, item.Line)
				}
				e.values = append(e.values, item.Value)
			}
		default:
			return nil, fmt.Errorf("key %q, line %d: takes a value or a list of values, not a mapping", k, vn.Line)
		}
		out = append(out, e)
	}
	return out, nil
}

// deref follows a YAML alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull says whether n is YAML's null: `~`, `null`, or nothing written.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

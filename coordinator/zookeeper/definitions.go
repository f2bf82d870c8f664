package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
)

// CreateDefinition implements coordinator.Definitions: a create of
// <generator>/definition (persistent), which ZooKeeper refuses with
// ErrNodeExists when one stands; that one is then read and returned.
func (c *Coordinator) CreateDefinition(ctx context.Context, d coordinator.GeneratorDefinition) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if err := c.checkGenerator(d.Name); err != nil {
		return err
	}
	p := c.paths(d.Name)
	if err := c.ensurePath(ctx, p.base); err != nil {
		return err
	}
	err := c.create(ctx, p.definition(), coordinator.EncodeDefinition(d), zk.FlagPersistent)
	switch {
	case err == nil:
		c.log.Info("generator defined", "generator", d.Name, "definition", d.Definition)
		return nil
	case !errors.Is(err, zk.ErrNodeExists):
		return unavailable("create definition", err)
	}
	b, _, err := c.get(ctx, p.definition())
	if err != nil {
		return unavailable("read definition", err)
	}
	old, err := coordinator.DecodeDefinition(d.Name, p.definition(), b)
	if err != nil {
		return err
	}
	return &coordinator.DefinitionExistsError{Existing: old}
}

// RetireDefinition implements coordinator.Definitions: reads the record
// and, unless it is retired already, sets it retired at the version read
// (read again when it moved).
func (c *Coordinator) RetireDefinition(ctx context.Context, name, why string, at time.Time) (coordinator.GeneratorDefinition, error) {
	if err := c.checkGenerator(name); err != nil {
		return coordinator.GeneratorDefinition{}, err
	}
	path := c.paths(name).definition()
	for attempt := 0; attempt < 10; attempt++ {
		b, st, err := c.get(ctx, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return coordinator.GeneratorDefinition{}, fmt.Errorf("%w: generator %q", coordinator.ErrNoDefinition, name)
		case err != nil:
			return coordinator.GeneratorDefinition{}, unavailable("read definition", err)
		}
		d, err := coordinator.DecodeDefinition(name, path, b)
		if err != nil {
			return coordinator.GeneratorDefinition{}, err
		}
		out, changed := d.Retire(why, at)
		if !changed {
			return out, nil
		}
		data := coordinator.EncodeDefinition(out)
		_, err = call(c, ctx, func() (*zk.Stat, error) { return c.client().Set(path, data, st.Version) })
		switch {
		case err == nil:
			c.log.Warn("generator retired", "generator", name, "reason", why)
			return out, nil
		case !errors.Is(err, zk.ErrBadVersion):
			return coordinator.GeneratorDefinition{}, unavailable("retire definition", err)
		}
	}
	return coordinator.GeneratorDefinition{}, fmt.Errorf("%w: zookeeper definition of %q kept changing", coordinator.ErrUnavailable, name)
}

// Definitions implements coordinator.Definitions: the cluster's
// generators are listed, and each one's definition node read. A record
// that does not decode is named in the
// *coordinator.UnreadableDefinitionsError beside the others.
func (c *Coordinator) Definitions(ctx context.Context) ([]coordinator.GeneratorDefinition, error) {
	names, err := c.children(ctx, c.root)
	if err != nil {
		return nil, unavailable("list generators", err)
	}
	sort.Strings(names)
	var out []coordinator.GeneratorDefinition
	var bad []coordinator.UnreadableDefinition
	for _, name := range names {
		path := c.paths(name).definition()
		b, _, err := c.get(ctx, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, unavailable("read definition", err)
		}
		d, err := coordinator.DecodeDefinition(name, path, b)
		if err != nil {
			bad = append(bad, coordinator.UnreadableDefinition{Name: name, Where: path, Err: err})
			continue
		}
		out = append(out, d)
	}
	return coordinator.UnreadableDefinitions(out, bad)
}

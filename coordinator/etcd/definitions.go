package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// CreateDefinition implements coordinator.Definitions: one txn that puts
// <generator>/definition only if it was never created
// (CreateRevision == 0), reading the standing one otherwise.
func (c *Coordinator) CreateDefinition(ctx context.Context, d coordinator.GeneratorDefinition) error {
	if err := d.Validate(); err != nil {
		return err
	}
	key := c.keys(d.Name).definition()
	cctx, cancel := c.call(ctx)
	resp, err := c.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(coordinator.EncodeDefinition(d)))).
		Else(clientv3.OpGet(key)).Commit()
	cancel()
	if err != nil {
		return unavailable("create definition", err)
	}
	if resp.Succeeded {
		c.log.Info("generator defined", "generator", d.Name, "definition", d.Definition)
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return fmt.Errorf("%w: etcd: %s neither absent nor readable", coordinator.ErrUnavailable, key)
	}
	old, err := coordinator.DecodeDefinition(d.Name, key, kvs[0].Value)
	if err != nil {
		return err
	}
	return &coordinator.DefinitionExistsError{Existing: old}
}

// RetireDefinition implements coordinator.Definitions: reads the record
// and, unless it is retired already, writes it retired guarded by the mod
// revision read (read again when it moved).
func (c *Coordinator) RetireDefinition(ctx context.Context, name, why string, at time.Time) (coordinator.GeneratorDefinition, error) {
	if !validName(name) {
		return coordinator.GeneratorDefinition{}, fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, name)
	}
	key := c.keys(name).definition()
	for attempt := 0; attempt < 10; attempt++ {
		cctx, cancel := c.call(ctx)
		g, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return coordinator.GeneratorDefinition{}, unavailable("read definition", err)
		}
		if len(g.Kvs) == 0 {
			return coordinator.GeneratorDefinition{}, fmt.Errorf("%w: generator %q", coordinator.ErrNoDefinition, name)
		}
		d, err := coordinator.DecodeDefinition(name, key, g.Kvs[0].Value)
		if err != nil {
			return coordinator.GeneratorDefinition{}, err
		}
		out, changed := d.Retire(why, at)
		if !changed {
			return out, nil
		}
		cctx, cancel = c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", g.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(coordinator.EncodeDefinition(out)))).Commit()
		cancel()
		if err != nil {
			return coordinator.GeneratorDefinition{}, unavailable("retire definition", err)
		}
		if resp.Succeeded {
			c.log.Warn("generator retired", "generator", name, "reason", why)
			return out, nil
		}
	}
	return coordinator.GeneratorDefinition{}, fmt.Errorf("%w: etcd definition of %q kept changing", coordinator.ErrUnavailable, name)
}

// defReadBatch bounds the gets of one read txn (etcd's --max-txn-ops
// defaults to 128).
const defReadBatch = 100

// Definitions implements coordinator.Definitions: the cluster's keys are
// listed (keys only), then every <generator>/definition among them read
// in read-only txns of at most defReadBatch gets. A record that does not
// decode is named in the *coordinator.UnreadableDefinitionsError beside
// the others; one listed and gone before its read (deleted by hand: a
// definition is never deleted) is absent, as it would have been listed a
// moment later.
func (c *Coordinator) Definitions(ctx context.Context) ([]coordinator.GeneratorDefinition, error) {
	cctx, cancel := c.call(ctx)
	g, err := c.cli.Get(cctx, c.root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return nil, unavailable("list definitions", err)
	}
	var names []string
	for _, kv := range g.Kvs {
		gen, leaf, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), c.root), "/")
		if ok && leaf == "definition" && validName(gen) {
			names = append(names, gen)
		}
	}
	out := make([]coordinator.GeneratorDefinition, 0, len(names))
	var bad []coordinator.UnreadableDefinition
	for len(names) > 0 {
		batch := names[:min(len(names), defReadBatch)]
		names = names[len(batch):]
		ops := make([]clientv3.Op, len(batch))
		for i, n := range batch {
			ops[i] = clientv3.OpGet(c.keys(n).definition())
		}
		cctx, cancel := c.call(ctx)
		r, err := c.cli.Txn(cctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, unavailable("read definitions", err)
		}
		for i, n := range batch {
			kvs := r.Responses[i].GetResponseRange().Kvs
			if len(kvs) != 1 {
				continue
			}
			key := c.keys(n).definition()
			d, err := coordinator.DecodeDefinition(n, key, kvs[0].Value)
			if err != nil {
				bad = append(bad, coordinator.UnreadableDefinition{Name: n, Where: key, Err: err})
				continue
			}
			out = append(out, d)
		}
	}
	return coordinator.UnreadableDefinitions(out, bad)
}

package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
)

func (c *Coordinator) checkGenerator(generator string) error {
	if !validNodeName(generator) {
		return fmt.Errorf("%w: generator %q is not a valid ZooKeeper node name", coordinator.ErrInvalidSpec, generator)
	}
	return nil
}

// Workers implements coordinator.Coordinator: every slot with an owner node
// or a reservation node, in (datacenter, worker) order.
func (c *Coordinator) Workers(ctx context.Context, generator string) ([]coordinator.Holder, error) {
	if err := c.checkGenerator(generator); err != nil {
		return nil, err
	}
	p := c.paths(generator)
	owners, err := c.children(ctx, p.owners())
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, unavailable("list owners", err)
	}
	res, err := c.children(ctx, p.reservations())
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, unavailable("list reservations", err)
	}
	byName := map[string]*coordinator.Holder{}
	add := func(name string) *coordinator.Holder {
		if h, ok := byName[name]; ok {
			return h
		}
		slot, ok := parseSlot(name)
		if !ok {
			return nil
		}
		h := &coordinator.Holder{Slot: slot, Reserved: -1}
		byName[name] = h
		return h
	}
	for _, name := range res {
		h := add(name)
		if h == nil {
			continue
		}
		d, _, err := c.get(ctx, p.reservations()+"/"+name)
		if err != nil {
			return nil, unavailable("read reservation", err)
		}
		if v, err := parseValue(d); err == nil {
			h.Reserved = v
		}
	}
	for _, name := range owners {
		h := add(name)
		if h == nil {
			continue
		}
		d, _, err := c.get(ctx, p.owners()+"/"+name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, unavailable("read owner", err)
		}
		h.Live = true
		h.Heartbeat = decodeOwner(d).Heartbeat()
	}
	out := make([]coordinator.Holder, 0, len(byName))
	for _, h := range byName {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Slot, out[j].Slot
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
	return out, nil
}

// ForceRelease implements coordinator.Coordinator. One multi deletes the
// owner node at the version read and rewrites the reservation with the
// exact bytes and version read: it fails if a new holder took the slot in
// between (its acquisition moved the reservation's version), and it keeps
// R. A slot with no owner is refused with coordinator.ErrNotHeld.
func (c *Coordinator) ForceRelease(ctx context.Context, generator string, slot coordinator.Slot) error {
	if err := c.checkGenerator(generator); err != nil {
		return err
	}
	p := c.paths(generator)
	ownerPath, resPath := p.owner(slot), p.reserved(slot)
	var last error
	for round := 0; round < maxWriteRounds; round++ {
		data, rst, err := c.get(ctx, resPath)
		if errors.Is(err, zk.ErrNoNode) {
			if st, err := c.exists(ctx, ownerPath); err == nil && st == nil {
				return fmt.Errorf("%w: generator %q %s", coordinator.ErrNotHeld, generator, slot)
			}
			return fmt.Errorf("zookeeper: %s has an owner but no reservation node", slot)
		}
		if err != nil {
			return unavailable("read reservation", err)
		}
		ost, err := c.exists(ctx, ownerPath)
		if err != nil {
			return unavailable("read owner", err)
		}
		if ost == nil {
			if round == 0 {
				return fmt.Errorf("%w: generator %q %s", coordinator.ErrNotHeld, generator, slot)
			}
			return nil // freed: by the previous, unanswered round or by someone else
		}
		_, err = c.multi(ctx, []any{
			&zk.DeleteRequest{Path: ownerPath, Version: ost.Version},
			&zk.SetDataRequest{Path: resPath, Data: data, Version: rst.Version},
		})
		if err == nil {
			c.log.Info("worker force-released", "generator", generator, "slot", slot.String(),
				"session", fmt.Sprintf("%#x", ost.EphemeralOwner), "reserved", string(data))
			return nil
		}
		if isPermanent(err) {
			return unavailable("force release", err)
		}
		last = err
		// Lost answer or a race: look again (a gone owner is success).
	}
	return unavailable("force release", fmt.Errorf("no outcome after %d rounds: %w", maxWriteRounds, last))
}

// Bump implements coordinator.Coordinator: it first raises the generator
// floor node (acquiring multis check its version), then every reservation
// node of generator by by, each with a version-checked write (a holder's
// next Reserve then re-reads and adopts the raised value).
func (c *Coordinator) Bump(ctx context.Context, generator string, by, now int64) error {
	if err := c.checkGenerator(generator); err != nil {
		return err
	}
	if by <= 0 {
		return fmt.Errorf("%w: bump %d must be positive", coordinator.ErrInvalidSpec, by)
	}
	if now < 0 {
		return fmt.Errorf("%w: bump at time %d: must be >= 0", coordinator.ErrInvalidSpec, now)
	}
	p := c.paths(generator)
	if err := c.ensureGenerator(ctx, p); err != nil {
		return err
	}
	names, err := c.children(ctx, p.reservations())
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return unavailable("list reservations", err)
	}
	top := now
	for _, name := range names {
		d, _, err := c.get(ctx, p.reservations()+"/"+name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return unavailable("read reservation", err)
		}
		v, err := parseValue(d)
		if err != nil {
			return fmt.Errorf("zookeeper: reservation %s/%s holds %q: refusing to guess", p.reservations(), name, d)
		}
		top = max(top, v)
	}
	if top > math.MaxInt64-by {
		return fmt.Errorf("%w: generator floor %d + %d overflows", coordinator.ErrInvalidSpec, top, by)
	}
	if err := c.raiseFloor(ctx, p.floor(), top+by); err != nil {
		return err
	}
	c.log.Warn("generator floor raised", "generator", generator, "floor", top+by)
	for _, name := range names {
		if err := c.bumpOne(ctx, p.reservations()+"/"+name, by); err != nil {
			return err
		}
	}
	c.log.Info("reservations bumped", "generator", generator, "by", by, "slots", len(names))
	return nil
}

func (c *Coordinator) bumpOne(ctx context.Context, path string, by int64) error {
	var last error
	for round := 0; round < 8; round++ {
		d, st, err := c.get(ctx, path)
		if err != nil {
			return unavailable("read reservation", err)
		}
		v, err := parseValue(d)
		if err != nil {
			return fmt.Errorf("zookeeper: reservation %s holds %q: refusing to guess", path, d)
		}
		want := encodeValue(v + by)
		_, err = call(c, ctx, func() (*zk.Stat, error) { return c.conn.Set(path, want, st.Version) })
		if err == nil {
			return nil
		}
		if isPermanent(err) {
			return unavailable("bump", err)
		}
		last = err
		if !errors.Is(err, zk.ErrBadVersion) {
			// No answer: applied if the node now holds our value one
			// version on.
			d2, st2, err2 := c.get(ctx, path)
			if err2 == nil && st2.Version == st.Version+1 && string(d2) == string(want) {
				return nil
			}
		}
	}
	return unavailable("bump", fmt.Errorf("%s: no outcome: %w", path, last))
}

// raiseFloor sets the generator floor node to at least v (creating it when
// absent), with version-checked writes; it never lowers it.
func (c *Coordinator) raiseFloor(ctx context.Context, path string, v int64) error {
	var last error
	for round := 0; round < 8; round++ {
		d, st, err := c.get(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			err := c.create(ctx, path, encodeValue(v), zk.FlagPersistent)
			if err == nil {
				return nil
			}
			if isPermanent(err) {
				return unavailable("create generator floor", err)
			}
			last = err
			continue // created meanwhile, or no answer: read again
		}
		if err != nil {
			return unavailable("read generator floor", err)
		}
		cur, err := parseValue(d)
		if err != nil {
			return fmt.Errorf("zookeeper: generator floor %s holds %q: refusing to guess", path, d)
		}
		if cur >= v {
			return nil
		}
		_, err = call(c, ctx, func() (*zk.Stat, error) { return c.conn.Set(path, encodeValue(v), st.Version) })
		if err == nil {
			return nil
		}
		if isPermanent(err) {
			return unavailable("raise generator floor", err)
		}
		last = err // a race or no answer: the next read decides
	}
	return unavailable("raise generator floor", fmt.Errorf("%s: no outcome: %w", path, last))
}

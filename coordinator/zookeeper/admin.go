package zookeeper

import (
	"bytes"
	"context"
	"encoding/json"
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

// Workers implements coordinator.Admin: every slot with an owner node
// or a reservation node, in (datacenter, worker) order. A reservation not
// in the canonical encoding is refused, naming its node.
func (c *Coordinator) Workers(ctx context.Context, generator string) ([]coordinator.SlotState, error) {
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
	byName := map[string]*coordinator.SlotState{}
	add := func(name string) *coordinator.SlotState {
		if h, ok := byName[name]; ok {
			return h
		}
		slot, ok := coordinator.ParseSlotKey(name)
		if !ok {
			return nil
		}
		h := &coordinator.SlotState{Slot: slot, Reserved: -1}
		byName[name] = h
		return h
	}
	for _, name := range res {
		h := add(name)
		if h == nil {
			continue
		}
		path := p.reservations() + "/" + name
		d, _, err := c.get(ctx, path)
		if err != nil {
			return nil, unavailable("read reservation", err)
		}
		if h.Reserved, err = parsePath(path, d); err != nil {
			return nil, err // never shown as a number it is not
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
	out := make([]coordinator.SlotState, 0, len(byName))
	for _, h := range byName {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Slot, out[j].Slot
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
	return out, nil
}

// ForceRelease implements coordinator.Admin. One multi deletes the
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
		next := c.nextHandshake()
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
		if !c.awaitConnection(ctx, next, err) {
			break
		}
	}
	return unavailable("force release", fmt.Errorf("no outcome after %d rounds: %w", maxWriteRounds, last))
}

// Bump implements coordinator.Admin: it reads the restore marker,
// the reservations and the generator floor, refuses (before writing
// anything) reservations beyond b.MaxAhead (b.CheckAhead, naming their
// owners), a By below a standing marker's gap and a floor past b.MaxTime,
// then raises the generator floor node (acquiring multis check its
// version), then every reservation node by b.By, each with a
// version-checked write (a holder's next Reserve then re-reads and adopts
// the raised value), and last deletes the marker it read (clearMarker).
func (c *Coordinator) Bump(ctx context.Context, b coordinator.BumpSpec) (coordinator.BumpResult, error) {
	if err := b.Validate(); err != nil {
		return coordinator.BumpResult{}, err
	}
	if err := c.checkGenerator(b.Generator); err != nil {
		return coordinator.BumpResult{}, err
	}
	p := c.paths(b.Generator)
	marker, mst, gen, err := c.own().readMarkerGen(ctx, p)
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	names, top, slots, err := c.readReservations(ctx, p)
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	floor := int64(-1)
	if d, _, err := c.get(ctx, p.floor()); err == nil {
		if floor, err = parsePath(p.floor(), d); err != nil {
			return coordinator.BumpResult{}, err
		}
	} else if !errors.Is(err, zk.ErrNoNode) {
		return coordinator.BumpResult{}, unavailable("read generator floor", err)
	}
	if lim, ok := b.AheadLimit(floor); ok && !b.IncludeAhead && top > lim {
		if err := c.readAheadOwners(ctx, p, slots, lim); err != nil {
			return coordinator.BumpResult{}, err
		}
	}
	if err := b.CheckAhead(slots, floor); err != nil {
		return coordinator.BumpResult{}, err
	}
	want, err := b.BumpFloor(top, marker)
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	if err := c.ensureGenerator(ctx, p); err != nil {
		return coordinator.BumpResult{}, err
	}
	raised, err := c.raiseFloor(ctx, p.floor(), want)
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	c.log.Warn("generator floor raised", "generator", b.Generator, "floor", raised)
	out := coordinator.BumpResult{Floor: raised}
	for _, name := range names {
		if err := c.bumpOne(ctx, p.reservations()+"/"+name, b.By); err != nil {
			return out, err
		}
	}
	c.log.Info("reservations bumped", "generator", b.Generator, "by", b.By, "slots", len(names))
	if marker == nil {
		return out, nil
	}
	if err := c.clearMarker(ctx, p, b, mst.Version, gen); err != nil {
		return out, err
	}
	c.log.Warn("restore marker cleared", "generator", b.Generator, "gap", marker.Gap(), "by", b.By)
	out.Cleared = marker
	return out, nil
}

// readReservations reads every reservation of the generator: their node
// names, the largest (-1 for none), and the slots they belong to.
func (c *Coordinator) readReservations(ctx context.Context, p paths) (names []string, top int64, slots []coordinator.SlotState, err error) {
	names, err = c.children(ctx, p.reservations())
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil, unavailable("list reservations", err)
	}
	top = -1
	for _, name := range names {
		path := p.reservations() + "/" + name
		d, _, err := c.get(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, 0, nil, unavailable("read reservation", err)
		}
		v, err := parsePath(path, d)
		if err != nil {
			return nil, 0, nil, err
		}
		top = max(top, v)
		if slot, ok := coordinator.ParseSlotKey(name); ok {
			slots = append(slots, coordinator.SlotState{Slot: slot, Reserved: v})
		}
	}
	return names, top, slots, nil
}

// readAheadOwners names the live holder of each reservation above lim
// (read after the reservations: a holder that left meanwhile shows as
// none).
func (c *Coordinator) readAheadOwners(ctx context.Context, p paths, slots []coordinator.SlotState, lim int64) error {
	for i := range slots {
		if slots[i].Reserved <= lim {
			continue
		}
		d, _, err := c.get(ctx, p.owner(slots[i].Slot))
		switch {
		case err == nil:
			slots[i].Live, slots[i].Heartbeat = true, decodeOwner(d).Heartbeat()
		case !errors.Is(err, zk.ErrNoNode):
			return unavailable("read owner", err)
		}
	}
	return nil
}

// clearMarker deletes the restore marker the bump read, in one multi
// with markerGenOp at gen, the generation read before it: a marker
// written again meanwhile, or deleted and created anew (at the same
// version), stands, and the bump says so.
func (c *Coordinator) clearMarker(ctx context.Context, p paths, b coordinator.BumpSpec, version, gen int32) error {
	res, err := c.multi(ctx, []any{&zk.DeleteRequest{Path: p.restored(), Version: version}, c.markerGenOp(p, gen)})
	switch {
	case err == nil:
	case failedOp(res) == 0 && errors.Is(err, zk.ErrNoNode):
		// Gone, and (its delete being the first op) with nothing standing
		// in its place: another bump cleared it.
	case failedOp(res) >= 0 && answered(err):
		now, _ := c.readMarker(ctx, p)
		gap, node := int64(0), ""
		if now != nil {
			gap, node = now.Gap(), now.Node.Name
		}
		return fmt.Errorf("%w: generator %q: the restore marker was written again during the bump (gap %d time units, by node %q): it stands; bump again",
			coordinator.ErrRestored, b.Generator, gap, node)
	default:
		// No answer: gone now means this delete (or another bump) took it.
		if st, err2 := c.exists(ctx, p.restored()); err2 != nil || st != nil {
			return unavailable("clear restore marker", err)
		}
	}
	return nil
}

// MarkRestored implements coordinator.Coordinator: it creates the
// generator's restore marker node, or replaces a standing one only with
// evidence it does not cover (Covers: a higher acknowledged value), or
// when it is not readable. Each write is one multi with markerGenOp at the
// version read before the marker: a replacement lands only on the exact
// marker read, never on one a bump's deletion made way for meanwhile
// (created anew, at the same version).
func (c *Coordinator) MarkRestored(ctx context.Context, ev coordinator.RestoreEvidence) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	if err := c.checkGenerator(ev.Generator); err != nil {
		return err
	}
	p := c.paths(ev.Generator)
	v, done, err := c.answering(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := v.ensurePath(ctx, p.base); err != nil {
		return err
	}
	data := coordinator.EncodeRestore(ev)
	var last error
	for round := 0; round < 8; round++ {
		gst, err := v.exists(ctx, p.markerGen())
		if err != nil {
			if isPermanent(err) {
				return unavailable("read restore marker generation", err)
			}
			last = err
			continue
		}
		gen := int32(-1)
		if gst != nil {
			gen = gst.Version
		}
		d, st, err := v.get(ctx, p.restored())
		var ops []any
		switch {
		case errors.Is(err, zk.ErrNoNode):
			ops = []any{&zk.CreateRequest{Path: p.restored(), Data: data, Acl: c.acl, Flags: zk.FlagPersistent}}
		case err != nil:
			last = err
			continue
		case bytes.Equal(d, data):
			return nil // ours (an unanswered write), or the same evidence
		default:
			if old, err := coordinator.DecodeRestore(p.restored(), d); err == nil && old.Covers(ev) {
				return nil // the standing marker covers this evidence
			}
			ops = []any{&zk.SetDataRequest{Path: p.restored(), Data: data, Version: st.Version}}
		}
		_, err = v.multi(ctx, append(ops, c.markerGenOp(p, gen)))
		if err == nil && st == nil {
			c.log.Error("restore marker written: no node acquires for this generator until a bump clears it",
				"generator", ev.Generator, "slot", ev.Slot.String(), "acked", ev.Acked, "shown", ev.Shown, "gap", ev.Gap(),
				"fresh_session", v.conn != nil)
			return nil
		}
		if err == nil {
			c.log.Error("restore marker replaced by evidence it did not cover (a higher acknowledged value)",
				"generator", ev.Generator, "slot", ev.Slot.String(), "acked", ev.Acked, "shown", ev.Shown, "gap", ev.Gap())
			return nil
		}
		if isPermanent(err) {
			return unavailable("write restore marker", err)
		}
		last = err // a race or no answer: the next read decides
	}
	return unavailable("write restore marker", fmt.Errorf("%s: no outcome: %w", p.restored(), last))
}

// Generators implements coordinator.Admin: every child of the
// cluster's node with a pin, a floor or a restore marker, sorted by name.
func (c *Coordinator) Generators(ctx context.Context) ([]coordinator.GeneratorState, error) {
	names, err := c.children(ctx, c.root)
	if err != nil {
		return nil, unavailable("list generators", err)
	}
	sort.Strings(names)
	out := make([]coordinator.GeneratorState, 0, len(names))
	for _, name := range names {
		p := c.paths(name)
		st := coordinator.GeneratorState{Name: name, Floor: -1}
		found := false
		d, _, err := c.get(ctx, p.pin())
		switch {
		case err == nil:
			if err := json.Unmarshal(d, &st.Pin); err != nil {
				return nil, fmt.Errorf("zookeeper: pin %s is not readable: %w", p.pin(), err)
			}
			found = true
		case !errors.Is(err, zk.ErrNoNode):
			return nil, unavailable("read pin", err)
		}
		d, _, err = c.get(ctx, p.floor())
		switch {
		case err == nil:
			if st.Floor, err = parsePath(p.floor(), d); err != nil {
				return nil, err
			}
			found = found || st.Floor >= 0
		case !errors.Is(err, zk.ErrNoNode):
			return nil, unavailable("read generator floor", err)
		}
		if st.Restore, err = c.readMarker(ctx, p); err != nil {
			return nil, err
		}
		if found || st.Restore != nil {
			out = append(out, st)
		}
	}
	return out, nil
}

func (c *Coordinator) bumpOne(ctx context.Context, path string, by int64) error {
	// Every write aims at what the first read found plus by, and a value
	// at or past it is done: a write whose answer was lost (and that may
	// land after it was given up on) is never bumped again. Nothing
	// lowers a reservation below a bump (a release keeps one made behind
	// its holder's back).
	var target int64
	aimed := false
	var last error
	for round := 0; round < 8; round++ {
		d, st, err := c.get(ctx, path)
		if err != nil {
			return unavailable("read reservation", err)
		}
		v, err := parsePath(path, d)
		if err != nil {
			return err
		}
		if !aimed {
			if v > math.MaxInt64-by {
				return fmt.Errorf("%w: bump of %s from %d by %d overflows", coordinator.ErrInvalidSpec, path, v, by)
			}
			target, aimed = v+by, true
		}
		if v >= target {
			return nil // landed, its answer lost; or raised past it by its holder
		}
		next := c.nextHandshake()
		_, err = call(c, ctx, func() (*zk.Stat, error) { return c.client().Set(path, encodeValue(target), st.Version) })
		if err == nil {
			return nil
		}
		if isPermanent(err) {
			return unavailable("bump", err)
		}
		last = err
		// A race or no answer: the next read decides, on the client's
		// next connection when this one was lost.
		if !c.awaitConnection(ctx, next, err) {
			break
		}
	}
	return unavailable("bump", fmt.Errorf("%s: no outcome: %w", path, last))
}

// raiseFloor sets the generator floor node to at least v (creating it when
// absent), with version-checked writes, deciding on the number read; it
// never lowers it. It returns the floor afterwards.
func (c *Coordinator) raiseFloor(ctx context.Context, path string, v int64) (int64, error) {
	var last error
	for round := 0; round < 8; round++ {
		d, st, err := c.get(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			err := c.create(ctx, path, encodeValue(v), zk.FlagPersistent)
			if err == nil {
				return v, nil
			}
			if isPermanent(err) {
				return 0, unavailable("create generator floor", err)
			}
			last = err
			continue // created meanwhile, or no answer: read again
		}
		if err != nil {
			return 0, unavailable("read generator floor", err)
		}
		cur, err := parsePath(path, d)
		if err != nil {
			return 0, err
		}
		if cur >= v {
			return cur, nil
		}
		next := c.nextHandshake()
		_, err = call(c, ctx, func() (*zk.Stat, error) { return c.client().Set(path, encodeValue(v), st.Version) })
		if err == nil {
			return v, nil
		}
		if isPermanent(err) {
			return 0, unavailable("raise generator floor", err)
		}
		last = err // a race or no answer: the next read decides, on a connection
		if !c.awaitConnection(ctx, next, err) {
			break
		}
	}
	return 0, unavailable("raise generator floor", fmt.Errorf("%s: no outcome: %w", path, last))
}

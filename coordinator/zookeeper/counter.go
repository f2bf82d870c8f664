package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// ReadCounter implements coordinator.Counters: after a sync, the marker,
// the pin and the counter, read in that order; the pin and a counter at the definition's
// start are created together (one multi) when neither exists.
func (c *Coordinator) ReadCounter(ctx context.Context, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterRecord{}, err
	}
	p := c.paths(spec.Generator)
	v, done, err := c.answering(ctx)
	if err != nil {
		return coordinator.CounterRecord{}, err
	}
	defer done()
	if v.conn != nil {
		// A probe reads only: a generator with no counter yet waits for
		// this client's session.
		rec, err := v.readCounter(ctx, p, spec)
		if errors.Is(err, zk.ErrNoNode) {
			return rec, unavailable("read counter through a fresh session", fmt.Errorf("%s has no pin yet", p.base))
		}
		return rec, err
	}
	if err := c.ensurePath(ctx, p.base); err != nil {
		return coordinator.CounterRecord{}, err
	}
	// A follower answers a read from its own copy, which can lag the
	// leader (one cut off from it answers for syncLimit ticks): synced
	// first, the read shows every write acknowledged before it began — a
	// restore marker another node wrote, which a claim's or a take's
	// confirming read must find (docs/design.md, "A claim settles before
	// use").
	if _, err := call(c, ctx, func() (string, error) { return c.client().Sync(p.base) }); err != nil {
		return coordinator.CounterRecord{}, unavailable("sync before reading the counter", err)
	}
	for {
		rec, err := c.readCounter(ctx, p, spec)
		if !errors.Is(err, zk.ErrNoNode) {
			return rec, err
		}
		want := coordinator.NewPin(spec.PinSpec())
		b, _ := json.Marshal(want)
		_, err = c.multi(ctx, []any{
			&zk.CreateRequest{Path: p.pin(), Data: b, Acl: c.acl, Flags: zk.FlagPersistent},
			&zk.CreateRequest{Path: p.counter(), Data: segment.NewCounter(spec.Definition).Encode(), Acl: c.acl, Flags: zk.FlagPersistent},
		})
		switch {
		case err == nil:
			c.log.Info("generator pinned", "generator", spec.Generator, "definition", spec.Definition.String(),
				"incarnation", want.Incarnation)
		case errors.Is(err, zk.ErrNodeExists): // another first node won
		default:
			return coordinator.CounterRecord{}, unavailable("create counter", err)
		}
	}
}

// readCounter reads the marker, the pin and the counter through the
// coordinator's own client; zk.ErrNoNode (unwrapped) when there is no pin
// yet.
func (c *Coordinator) readCounter(ctx context.Context, p paths, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	return c.own().readCounter(ctx, p, spec)
}

// readCounter is Coordinator.readCounter through v.
func (v via) readCounter(ctx context.Context, p paths, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	if ev, _, err := v.readMarkerStat(ctx, p); err != nil {
		return coordinator.CounterRecord{}, err
	} else if ev != nil {
		return coordinator.CounterRecord{}, &coordinator.RestoredError{Evidence: *ev}
	}
	data, _, err := v.get(ctx, p.pin())
	if errors.Is(err, zk.ErrNoNode) {
		return coordinator.CounterRecord{}, zk.ErrNoNode
	}
	if err != nil {
		return coordinator.CounterRecord{}, unavailable("read pin", err)
	}
	var pin coordinator.Pin
	if err := json.Unmarshal(data, &pin); err != nil {
		return coordinator.CounterRecord{}, fmt.Errorf("zookeeper: pin %s is not readable: %w", p.pin(), err)
	}
	if err := pin.Check(spec.PinSpec()); err != nil {
		return coordinator.CounterRecord{}, err
	}
	data, st, err := v.get(ctx, p.counter())
	if errors.Is(err, zk.ErrNoNode) {
		return coordinator.CounterRecord{}, fmt.Errorf("%w: generator %q is pinned to %q but %s is absent",
			segment.ErrCounter, spec.Generator, pin.Layout, p.counter())
	}
	if err != nil {
		return coordinator.CounterRecord{}, unavailable("read counter", err)
	}
	return coordinator.DecodeCounterRecord(p.counter(), spec, data, int64(st.Version))
}

// SwapCounter implements coordinator.Counters: one multi that fails while
// a restore marker exists (markerAbsentOps) and writes next at the
// version prev was read at (counterOp). A refused multi reads the counter
// again for the retry.
func (c *Coordinator) SwapCounter(ctx context.Context, spec coordinator.CounterSpec, prev coordinator.CounterRecord, next segment.Counter) (coordinator.CounterRecord, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterRecord{}, err
	}
	if err := next.Validate(spec.Definition); err != nil {
		return coordinator.CounterRecord{}, fmt.Errorf("%w: %v", coordinator.ErrInvalidSpec, err)
	}
	p := c.paths(spec.Generator)
	raw := next.Encode()
	ops := append(c.markerAbsentOps(p), counterOp(p.counter(), raw, int32(prev.Version)))
	res, err := c.multi(ctx, ops)
	if err == nil {
		st := res[len(res)-1].Stat
		if st == nil {
			return coordinator.CounterRecord{}, unavailable("swap counter", errors.New("multi answered without the counter's stat"))
		}
		return coordinator.CounterRecord{State: next, Raw: raw, Version: int64(st.Version)}, nil
	}
	if !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
		return coordinator.CounterRecord{}, unavailable("swap counter", err)
	}
	rec, rerr := c.readCounter(ctx, p, spec)
	if rerr != nil {
		return coordinator.CounterRecord{}, rerr
	}
	return rec, fmt.Errorf("%w: generator %q", coordinator.ErrCounterMoved, spec.Generator)
}

// BumpCounter implements coordinator.Counters: the marker, the pin and the
// counter read, then one multi that sets the bumped counter at the version
// read and deletes the marker read (its version and the marker's
// generation, markerGenOp), again from a new read while other writes come
// between. A bump that does not cover the marker read is refused before
// the multi (coordinator.BumpedCounter), and so is a marker that does not
// decode (coordinator.DecodeRestore's error).
func (c *Coordinator) BumpCounter(ctx context.Context, spec coordinator.CounterSpec, by uint64) (coordinator.CounterBump, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterBump{}, err
	}
	p := c.paths(spec.Generator)
	for attempt := 0; attempt < 10; attempt++ {
		// A marker that does not decode still stands: only an operator
		// can judge it, so the bump refuses it before writing anything,
		// as Bump does.
		ev, mst, gen, err := c.own().readMarkerGen(ctx, p)
		if err != nil {
			return coordinator.CounterBump{}, err
		}
		data, _, err := c.get(ctx, p.pin())
		if errors.Is(err, zk.ErrNoNode) {
			return coordinator.CounterBump{}, fmt.Errorf("%w: generator %q has no counter to bump", coordinator.ErrInvalidSpec, spec.Generator)
		}
		if err != nil {
			return coordinator.CounterBump{}, unavailable("read pin", err)
		}
		var pin coordinator.Pin
		if err := json.Unmarshal(data, &pin); err != nil {
			return coordinator.CounterBump{}, fmt.Errorf("zookeeper: pin %s is not readable: %w", p.pin(), err)
		}
		if err := pin.Check(spec.PinSpec()); err != nil {
			return coordinator.CounterBump{}, err
		}
		data, st, err := c.get(ctx, p.counter())
		if errors.Is(err, zk.ErrNoNode) {
			return coordinator.CounterBump{}, fmt.Errorf("%w: generator %q has no counter to bump", coordinator.ErrInvalidSpec, spec.Generator)
		}
		if err != nil {
			return coordinator.CounterBump{}, unavailable("read counter", err)
		}
		bump, raw, err := coordinator.BumpedCounter(p.counter(), spec, data, by, ev)
		if err != nil {
			return coordinator.CounterBump{}, err
		}
		bump.Cleared = ev
		ops := []any{&zk.SetDataRequest{Path: p.counter(), Data: raw, Version: st.Version}}
		if mst != nil {
			ops = append(ops, &zk.DeleteRequest{Path: p.restored(), Version: mst.Version}, c.markerGenOp(p, gen))
		} else {
			ops = append(c.markerAbsentOps(p), ops...)
		}
		_, err = c.multi(ctx, ops)
		if err == nil {
			c.log.Warn("segment counter bumped", "generator", spec.Generator, "next", bump.After.Next, "seq", bump.After.Seq,
				"dropped_free", bump.Dropped, "cleared_marker", bump.Cleared != nil)
			return bump, nil
		}
		if !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
			return coordinator.CounterBump{}, unavailable("bump counter", err)
		}
	}
	return coordinator.CounterBump{}, fmt.Errorf("%w: zookeeper counter of %q kept changing during the bump", coordinator.ErrUnavailable, spec.Generator)
}

package etcd

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// ReadCounter implements coordinator.Counters: one read of the pin, the
// counter and the restore marker; the pin and a counter at the
// definition's start are created together, create-if-absent, when
// neither exists.
func (c *Coordinator) ReadCounter(ctx context.Context, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterRecord{}, err
	}
	k := c.keys(spec.Generator)
	for {
		cctx, cancel := c.call(ctx)
		resp, err := c.cli.Txn(cctx).Then(
			clientv3.OpGet(k.pin()), clientv3.OpGet(k.counter()), clientv3.OpGet(k.restored()),
		).Commit()
		cancel()
		if err != nil {
			return coordinator.CounterRecord{}, unavailable("read counter", err)
		}
		pins := resp.Responses[0].GetResponseRange().Kvs
		if len(pins) == 0 {
			if err := c.createCounter(ctx, k, spec); err != nil {
				return coordinator.CounterRecord{}, err
			}
			continue
		}
		return counterFrom(k, spec, pins, resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs)
	}
}

// SwapCounter implements coordinator.Counters: one txn, If(the counter is
// prev (counterGuard), no restore marker) Then(put next) Else(read the
// counter and the marker).
func (c *Coordinator) SwapCounter(ctx context.Context, spec coordinator.CounterSpec, prev coordinator.CounterRecord, next segment.Counter) (coordinator.CounterRecord, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterRecord{}, err
	}
	if err := next.Validate(spec.Definition); err != nil {
		return coordinator.CounterRecord{}, fmt.Errorf("%w: %v", coordinator.ErrInvalidSpec, err)
	}
	k := c.keys(spec.Generator)
	raw := next.Encode()
	cmps := append(counterGuard(k.counter(), prev), clientv3.Compare(clientv3.CreateRevision(k.restored()), "=", 0))
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).If(cmps...).
		Then(clientv3.OpPut(k.counter(), string(raw))).
		Else(clientv3.OpGet(k.pin()), clientv3.OpGet(k.counter()), clientv3.OpGet(k.restored())).
		Commit()
	if err != nil {
		return coordinator.CounterRecord{}, unavailable("swap counter", err)
	}
	if resp.Succeeded {
		return coordinator.CounterRecord{State: next, Raw: raw, Version: resp.Header.Revision}, nil
	}
	rec, err := counterFrom(k, spec, resp.Responses[0].GetResponseRange().Kvs,
		resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs)
	if err != nil {
		return coordinator.CounterRecord{}, err
	}
	return rec, fmt.Errorf("%w: generator %q", coordinator.ErrCounterMoved, spec.Generator)
}

// createCounter writes the pin and a counter at the definition's start,
// if neither exists: of two first nodes exactly one wins, and the caller
// reads again either way.
func (c *Coordinator) createCounter(ctx context.Context, k keys, spec coordinator.CounterSpec) error {
	want := coordinator.NewPin(spec.PinSpec())
	b, _ := json.Marshal(want)
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.pin()), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(k.counter()), "=", 0)).
		Then(clientv3.OpPut(k.pin(), string(b)),
			clientv3.OpPut(k.counter(), string(segment.NewCounter(spec.Definition).Encode()))).
		Commit()
	if err != nil {
		return unavailable("create counter", err)
	}
	if resp.Succeeded {
		c.log.Info("generator pinned", "generator", spec.Generator, "definition", spec.Definition.String(),
			"incarnation", want.Incarnation)
	}
	return nil
}

// counterFrom checks what a read found: the marker refused, the pin
// checked, the counter decoded and validated.
func counterFrom(k keys, spec coordinator.CounterSpec, pins, counters, markers []*mvccpb.KeyValue) (coordinator.CounterRecord, error) {
	if len(markers) == 1 {
		ev, err := coordinator.DecodeRestore(k.restored(), markers[0].Value)
		if err != nil {
			return coordinator.CounterRecord{}, err
		}
		return coordinator.CounterRecord{}, &coordinator.RestoredError{Evidence: ev}
	}
	if len(pins) != 1 {
		return coordinator.CounterRecord{}, fmt.Errorf("%w: generator %q has no pin", segment.ErrCounter, spec.Generator)
	}
	pin, err := checkCounterPin(k, spec, pins[0].Value)
	if err != nil {
		return coordinator.CounterRecord{}, err
	}
	if len(counters) != 1 {
		return coordinator.CounterRecord{}, fmt.Errorf("%w: generator %q is pinned to %q but %s is absent",
			segment.ErrCounter, spec.Generator, pin.Layout, k.counter())
	}
	return coordinator.DecodeCounterRecord(k.counter(), spec, counters[0].Value, counters[0].ModRevision)
}

// BumpCounter implements coordinator.Counters: a read of the pin, the
// counter and the marker, then one txn If(the counter and the marker as
// read) Then(put the bumped counter, delete the marker), again from a new
// read while other writes come between. A bump that does not cover the
// marker read is refused before the txn (coordinator.BumpedCounter), and
// so is a marker that does not decode (coordinator.DecodeRestore's error).
func (c *Coordinator) BumpCounter(ctx context.Context, spec coordinator.CounterSpec, by uint64) (coordinator.CounterBump, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterBump{}, err
	}
	k := c.keys(spec.Generator)
	for attempt := 0; attempt < 10; attempt++ {
		cctx, cancel := c.call(ctx)
		resp, err := c.cli.Txn(cctx).Then(
			clientv3.OpGet(k.pin()), clientv3.OpGet(k.counter()), clientv3.OpGet(k.restored()),
		).Commit()
		cancel()
		if err != nil {
			return coordinator.CounterBump{}, unavailable("read counter", err)
		}
		pins, counters, markers := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs
		if len(pins) != 1 || len(counters) != 1 {
			return coordinator.CounterBump{}, fmt.Errorf("%w: generator %q has no counter to bump", coordinator.ErrInvalidSpec, spec.Generator)
		}
		if _, err := checkCounterPin(k, spec, pins[0].Value); err != nil {
			return coordinator.CounterBump{}, err
		}
		var marker *coordinator.RestoreEvidence
		if len(markers) == 1 {
			// A marker that does not decode still stands: only an
			// operator can judge it, so the bump refuses it before
			// writing anything, as Bump does.
			ev, err := coordinator.DecodeRestore(k.restored(), markers[0].Value)
			if err != nil {
				return coordinator.CounterBump{}, err
			}
			marker = &ev
		}
		bump, raw, err := coordinator.BumpedCounter(k.counter(), spec, counters[0].Value, by, marker)
		if err != nil {
			return coordinator.CounterBump{}, err
		}
		bump.Cleared = marker
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k.counter()), "=", counters[0].ModRevision)}
		if len(markers) == 1 {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k.restored()), "=", markers[0].ModRevision))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k.restored()), "=", 0))
		}
		cctx, cancel = c.call(ctx)
		w, err := c.cli.Txn(cctx).If(cmps...).
			Then(clientv3.OpPut(k.counter(), string(raw)), clientv3.OpDelete(k.restored())).Commit()
		cancel()
		if err != nil {
			return coordinator.CounterBump{}, unavailable("bump counter", err)
		}
		if w.Succeeded {
			c.log.Warn("segment counter bumped", "generator", spec.Generator, "next", bump.After.Next, "seq", bump.After.Seq,
				"dropped_free", bump.Dropped, "cleared_marker", bump.Cleared != nil)
			return bump, nil
		}
	}
	return coordinator.CounterBump{}, fmt.Errorf("%w: etcd counter of %q kept changing during the bump", coordinator.ErrUnavailable, spec.Generator)
}

// checkCounterPin decodes a segment generator's stored pin and checks it
// against spec's definition.
func checkCounterPin(k keys, spec coordinator.CounterSpec, raw []byte) (coordinator.Pin, error) {
	var pin coordinator.Pin
	if err := json.Unmarshal(raw, &pin); err != nil {
		return pin, fmt.Errorf("etcd: pin %s is not readable: %w", k.pin(), err)
	}
	return pin, pin.Check(spec.PinSpec())
}

package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// Workers implements coordinator.Admin: every slot of the generator
// with an owner or a reservation, in slot order.
func (c *Coordinator) Workers(ctx context.Context, generator string) ([]coordinator.SlotState, error) {
	if !validName(generator) {
		return nil, fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, generator)
	}
	s, err := c.scan(ctx, c.keys(generator))
	if err != nil {
		return nil, err
	}
	bySlot := map[coordinator.Slot]*coordinator.SlotState{}
	get := func(name string) *coordinator.SlotState {
		slot, ok := coordinator.ParseSlotKey(name)
		if !ok {
			return nil
		}
		h := bySlot[slot]
		if h == nil {
			h = &coordinator.SlotState{Slot: slot, Reserved: -1}
			bySlot[slot] = h
		}
		return h
	}
	for name, o := range s.owners {
		if h := get(name); h != nil {
			h.Live, h.Heartbeat = true, o.rec.Heartbeat()
		}
	}
	for name, r := range s.reserved {
		if h := get(name); h != nil {
			h.Reserved = r.value
		}
	}
	out := make([]coordinator.SlotState, 0, len(bySlot))
	for _, h := range bySlot {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Slot, out[j].Slot
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
	return out, nil
}

// ForceRelease implements coordinator.Admin: deletes the slot's owner
// key in a txn guarded by the create revision just read, keeping the
// reservation. It returns coordinator.ErrNotHeld when the slot has no owner.
func (c *Coordinator) ForceRelease(ctx context.Context, generator string, slot coordinator.Slot) error {
	if !validName(generator) {
		return fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, generator)
	}
	key := c.keys(generator).owner(slot)
	for attempt := 0; attempt < 5; attempt++ {
		cctx, cancel := c.call(ctx)
		g, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return unavailable("read owner", err)
		}
		if len(g.Kvs) == 0 {
			return fmt.Errorf("%w: generator %q %s", coordinator.ErrNotHeld, generator, slot)
		}
		kv := g.Kvs[0]
		cctx, cancel = c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(ownerGuard(key, kv.CreateRevision, clientv3.LeaseID(kv.Lease))...).
			Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if err != nil {
			return unavailable("force release", err)
		}
		if resp.Succeeded {
			c.log.Warn("worker force-released", "generator", generator, "slot", slot.String(),
				"revision", kv.CreateRevision, "holder", string(kv.Value))
			return nil
		}
	}
	return fmt.Errorf("%w: etcd force release of %s: owner kept changing", coordinator.ErrUnavailable, slot)
}

// Bump implements coordinator.Admin. It reads the reservations, their
// owners, the generator floor and the restore marker in one consistent
// read, refuses (before writing anything) reservations beyond b.MaxAhead
// (b.CheckAhead), a By below a standing marker's gap and a floor past
// b.MaxTime, then raises the generator floor (read, compared as a
// number, written guarded on its mod revision; acquisitions compare its
// mod revision), then every reservation, each guarded by its mod revision,
// and last deletes the marker guarded by the mod revision it read.
func (c *Coordinator) Bump(ctx context.Context, b coordinator.BumpSpec) (coordinator.BumpResult, error) {
	if err := b.Validate(); err != nil {
		return coordinator.BumpResult{}, err
	}
	k := c.keys(b.Generator)
	st, err := c.readForBump(ctx, k)
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	if err := b.CheckAhead(st.slots, st.floor); err != nil {
		return coordinator.BumpResult{}, err
	}
	want, err := b.BumpFloor(st.top, st.marker)
	if err != nil {
		return coordinator.BumpResult{}, err
	}
	floor, err := c.raiseNumber(ctx, k.floor(), want)
	if err != nil {
		return coordinator.BumpResult{}, fmt.Errorf("raising the generator floor: %w", err)
	}
	c.log.Warn("generator floor raised", "generator", b.Generator, "floor", floor)
	out := coordinator.BumpResult{Floor: floor}
	for _, kv := range st.reservations {
		if err := c.bumpKey(ctx, b, kv); err != nil {
			return out, err
		}
	}
	if st.marker == nil {
		return out, nil
	}
	if err := c.clearMarker(ctx, k, b, st.markerRev); err != nil {
		return out, err
	}
	c.log.Warn("restore marker cleared", "generator", b.Generator, "gap", st.marker.Gap(), "by", b.By)
	out.Cleared = st.marker
	return out, nil
}

// bumpState is what a bump reads of a generator in one revision.
type bumpState struct {
	reservations []*mvccpb.KeyValue
	top          int64                   // the largest reservation; -1 for none
	slots        []coordinator.SlotState // the reservations with their live owners
	floor        int64                   // the stored generator floor; -1 for none
	marker       *coordinator.RestoreEvidence
	markerRev    int64
}

// readForBump reads the generator's reservations, floor, restore marker
// and owners in one transaction.
func (c *Coordinator) readForBump(ctx context.Context, k keys) (bumpState, error) {
	cctx, cancel := c.call(ctx)
	g, err := c.cli.Txn(cctx).Then(
		clientv3.OpGet(k.reservations(), clientv3.WithPrefix()),
		clientv3.OpGet(k.floor()),
		clientv3.OpGet(k.restored()),
		clientv3.OpGet(k.owners(), clientv3.WithPrefix()),
	).Commit()
	cancel()
	if err != nil {
		return bumpState{}, unavailable("read reservations", err)
	}
	st := bumpState{reservations: g.Responses[0].GetResponseRange().Kvs, top: -1}
	owners := map[string]coordinator.Heartbeat{}
	for _, kv := range g.Responses[3].GetResponseRange().Kvs {
		owners[strings.TrimPrefix(string(kv.Key), k.owners())] = coordinator.DecodeOwner(kv.Value).Heartbeat()
	}
	for _, kv := range st.reservations {
		v, err := parseKey(string(kv.Key), kv.Value)
		if err != nil {
			return bumpState{}, err
		}
		st.top = max(st.top, v)
		name := strings.TrimPrefix(string(kv.Key), k.reservations())
		if slot, ok := coordinator.ParseSlotKey(name); ok {
			hb, live := owners[name]
			st.slots = append(st.slots, coordinator.SlotState{Slot: slot, Live: live, Heartbeat: hb, Reserved: v})
		}
	}
	stored, err := readStored(k.floor(), g.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return bumpState{}, err
	}
	st.floor = stored.value
	if kvs := g.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
		ev, err := coordinator.DecodeRestore(k.restored(), kvs[0].Value)
		if err != nil {
			return bumpState{}, err
		}
		st.marker, st.markerRev = &ev, kvs[0].ModRevision
	}
	return st, nil
}

// bumpKey raises one reservation by b.By, by compare-and-swap on its mod
// revision, reading it again when it changed meanwhile (ten tries).
func (c *Coordinator) bumpKey(ctx context.Context, b coordinator.BumpSpec, kv *mvccpb.KeyValue) error {
	key := string(kv.Key)
	for attempt := 0; ; attempt++ {
		v, err := parseKey(key, kv.Value)
		if err != nil {
			return err
		}
		if v > math.MaxInt64-b.By {
			return fmt.Errorf("%w: bump of %s from %d by %d overflows", coordinator.ErrInvalidSpec, key, v, b.By)
		}
		cctx, cancel := c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, pad(v+b.By)), clientv3.OpGet(key)).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return unavailable("bump", err)
		}
		if resp.Succeeded {
			after, err := readStored(key, resp.Responses[1].GetResponseRange().Kvs)
			if err != nil {
				return err
			}
			if after.value != v+b.By {
				return fmt.Errorf("etcd: %s holds %d after %d was written", key, after.value, v+b.By)
			}
			c.log.Warn("reservation bumped", "generator", b.Generator, "key", key, "from", v, "to", v+b.By)
			return nil
		}
		if attempt == 10 {
			return fmt.Errorf("%w: bump of %s: value kept changing", coordinator.ErrUnavailable, key)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 {
			return nil
		}
		kv = kvs[0]
	}
}

// clearMarker deletes the restore marker the bump read (at markerRev);
// one written again meanwhile stands, and the bump says so.
func (c *Coordinator) clearMarker(ctx context.Context, k keys, b coordinator.BumpSpec, markerRev int64) error {
	cctx, cancel := c.call(ctx)
	resp, err := c.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(k.restored()), "=", markerRev)).
		Then(clientv3.OpDelete(k.restored())).
		Else(clientv3.OpGet(k.restored())).Commit()
	cancel()
	if err != nil {
		return unavailable("clear restore marker", err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			now, _ := coordinator.DecodeRestore(k.restored(), kvs[0].Value)
			return fmt.Errorf("%w: generator %q: the restore marker was written again during the bump (gap %d time units, by node %q): it stands; bump again",
				coordinator.ErrRestored, b.Generator, now.Gap(), now.Node.Name)
		}
		// Deleted meanwhile (another bump): cleared all the same.
	}
	return nil
}

// MarkRestored implements coordinator.Coordinator: a create-if-absent of
// the generator's restore marker; a standing marker is replaced, guarded by
// its mod revision, only by evidence it does not cover (Covers: a higher
// acknowledged value), or when it is not readable.
func (c *Coordinator) MarkRestored(ctx context.Context, ev coordinator.RestoreEvidence) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	key := c.keys(ev.Generator).restored()
	data := string(coordinator.EncodeRestore(ev))
	for attempt := 0; attempt < 10; attempt++ {
		cctx, cancel := c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, data)).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return unavailable("write restore marker", err)
		}
		if resp.Succeeded {
			c.log.Error("restore marker written: no node acquires for this generator until a bump clears it",
				"generator", ev.Generator, "slot", ev.Slot.String(), "acked", ev.Acked, "shown", ev.Shown, "gap", ev.Gap())
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 {
			continue // deleted meanwhile: create it
		}
		if old, err := coordinator.DecodeRestore(key, kvs[0].Value); err == nil && old.Covers(ev) {
			return nil // the standing marker covers this evidence
		}
		cctx, cancel = c.call(ctx)
		resp, err = c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, data)).Commit()
		cancel()
		if err != nil {
			return unavailable("write restore marker", err)
		}
		if resp.Succeeded {
			c.log.Error("restore marker replaced by evidence it did not cover (a higher acknowledged value)",
				"generator", ev.Generator, "slot", ev.Slot.String(), "acked", ev.Acked, "shown", ev.Shown, "gap", ev.Gap())
			return nil
		}
	}
	return fmt.Errorf("%w: etcd restore marker of %q kept changing", coordinator.ErrUnavailable, ev.Generator)
}

// Generators implements coordinator.Admin: every generator of the
// cluster with a pin, a floor or a restore marker, sorted by name.
func (c *Coordinator) Generators(ctx context.Context) ([]coordinator.GeneratorState, error) {
	cctx, cancel := c.call(ctx)
	g, err := c.cli.Get(cctx, c.root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return nil, unavailable("list generators", err)
	}
	seen := map[string]bool{}
	var names []string
	for _, kv := range g.Kvs {
		gen, leaf, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), c.root), "/")
		if !ok || strings.Contains(leaf, "/") || seen[gen] || (leaf != "pin" && leaf != "floor" && leaf != "restored") {
			continue
		}
		seen[gen] = true
		names = append(names, gen)
	}
	sort.Strings(names)
	out := make([]coordinator.GeneratorState, 0, len(names))
	for _, name := range names {
		k := c.keys(name)
		cctx, cancel := c.call(ctx)
		r, err := c.cli.Txn(cctx).Then(clientv3.OpGet(k.pin()), clientv3.OpGet(k.floor()), clientv3.OpGet(k.restored())).Commit()
		cancel()
		if err != nil {
			return nil, unavailable("read generator "+name, err)
		}
		st := coordinator.GeneratorState{Name: name, Floor: -1}
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			if err := json.Unmarshal(kvs[0].Value, &st.Pin); err != nil {
				return nil, fmt.Errorf("etcd: pin %s is not readable: %w", k.pin(), err)
			}
		}
		f, err := readStored(k.floor(), r.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return nil, err
		}
		st.Floor = f.value
		if kvs := r.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
			ev, err := coordinator.DecodeRestore(k.restored(), kvs[0].Value)
			if err != nil {
				return nil, err
			}
			st.Restore = &ev
		}
		out = append(out, st)
	}
	return out, nil
}

// Peers implements coordinator.Coordinator: the live holders of every
// generator of the cluster, each with the local clock reading at which its
// last heartbeat was received. The first call starts a watch of the owner
// records and waits for its initial read.
func (c *Coordinator) Peers(ctx context.Context) ([]coordinator.PeerBeat, error) {
	c.peersOnce.Do(func() {
		c.wg.Add(1)
		go c.watchPeers()
	})
	select {
	case <-c.peersReady:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: etcd peers: %w", coordinator.ErrUnavailable, ctx.Err())
	}
	c.peersMu.Lock()
	defer c.peersMu.Unlock()
	if c.peersErr != nil {
		return nil, c.peersErr
	}
	out := make([]coordinator.PeerBeat, 0, len(c.peers))
	for _, p := range c.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Generator != out[j].Generator {
			return out[i].Generator < out[j].Generator
		}
		a, b := out[i].Slot, out[j].Slot
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
	return out, nil
}

// peerKey splits "<root><generator>/owner/<slot>".
func (c *Coordinator) peerKey(key string) (string, coordinator.Slot, bool) {
	rest, ok := strings.CutPrefix(key, c.root)
	if !ok {
		return "", coordinator.Slot{}, false
	}
	gen, name, ok := strings.Cut(rest, "/owner/")
	if !ok || strings.Contains(gen, "/") {
		return "", coordinator.Slot{}, false
	}
	slot, ok := coordinator.ParseSlotKey(name)
	return gen, slot, ok
}

func (c *Coordinator) putPeer(key string, value []byte) {
	gen, slot, ok := c.peerKey(key)
	if !ok {
		return
	}
	var rec ownerRecord
	if json.Unmarshal(value, &rec) != nil {
		return // not an owner record: no heartbeat to compare
	}
	now, _ := c.clock.Now()
	c.peers[key] = coordinator.PeerBeat{Generator: gen, Slot: slot, Heartbeat: rec.Heartbeat(), Received: now}
}

func (c *Coordinator) watchPeers() {
	defer c.wg.Done()
	ready := false
	markReady := func(err error) {
		c.peersMu.Lock()
		c.peersErr = err
		c.peersMu.Unlock()
		if !ready {
			ready = true
			close(c.peersReady)
		}
	}
	for c.bg.Err() == nil {
		cctx, cancel := c.call(c.bg)
		g, err := c.cli.Get(cctx, c.root, clientv3.WithPrefix())
		cancel()
		if err != nil {
			if !ready {
				markReady(unavailable("read peers", err))
			}
			select {
			case <-c.bg.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		c.peersMu.Lock()
		c.peers = map[string]coordinator.PeerBeat{}
		for _, kv := range g.Kvs {
			c.putPeer(string(kv.Key), kv.Value)
		}
		c.peersMu.Unlock()
		markReady(nil)
		wch := c.cli.Watch(clientv3.WithRequireLeader(c.bg), c.root, clientv3.WithPrefix(), clientv3.WithRev(g.Header.Revision+1))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			c.peersMu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					delete(c.peers, string(ev.Kv.Key))
				} else {
					c.putPeer(string(ev.Kv.Key), ev.Kv.Value)
				}
			}
			c.peersMu.Unlock()
		}
	}
}

package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// Workers implements coordinator.Coordinator: every slot of the generator
// with an owner or a reservation, in slot order.
func (c *Coordinator) Workers(ctx context.Context, generator string) ([]coordinator.Holder, error) {
	if !validName(generator) {
		return nil, fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, generator)
	}
	s, err := c.scan(ctx, c.keys(generator))
	if err != nil {
		return nil, err
	}
	bySlot := map[coordinator.Slot]*coordinator.Holder{}
	get := func(name string) *coordinator.Holder {
		slot, ok := parseSlot(name)
		if !ok {
			return nil
		}
		h := bySlot[slot]
		if h == nil {
			h = &coordinator.Holder{Slot: slot, Reserved: -1}
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
	out := make([]coordinator.Holder, 0, len(bySlot))
	for _, h := range bySlot {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Slot, out[j].Slot
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
	return out, nil
}

// ForceRelease implements coordinator.Coordinator: deletes the slot's owner
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
			If(ownerGuard(key, kv.CreateRevision, clientv3.LeaseID(kv.Lease))).
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

// Bump implements coordinator.Coordinator: it first raises the generator
// floor (a txn that never lowers it, so a retried or concurrent bump is
// harmless; acquisitions compare its mod revision), then every
// reservation, each in a txn guarded by the value's mod revision.
func (c *Coordinator) Bump(ctx context.Context, generator string, by, now int64) error {
	if !validName(generator) {
		return fmt.Errorf("%w: generator %q", coordinator.ErrInvalidSpec, generator)
	}
	if by <= 0 {
		return fmt.Errorf("%w: bump %d must be positive", coordinator.ErrInvalidSpec, by)
	}
	if now < 0 {
		return fmt.Errorf("%w: bump at time %d: must be >= 0", coordinator.ErrInvalidSpec, now)
	}
	k := c.keys(generator)
	cctx, cancel := c.call(ctx)
	g, err := c.cli.Get(cctx, k.reservations(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return unavailable("read reservations", err)
	}
	top := now
	for _, kv := range g.Kvs {
		v, err := parseValue(kv.Value)
		if err != nil {
			return fmt.Errorf("etcd: reservation %s holds %q", kv.Key, kv.Value)
		}
		top = max(top, v)
	}
	if top > math.MaxInt64-by {
		return fmt.Errorf("%w: generator floor %d + %d overflows", coordinator.ErrInvalidSpec, top, by)
	}
	cctx, cancel = c.call(ctx)
	_, err = c.cli.Txn(cctx).Then(raiseTo(k.floor(), top+by)).Commit()
	cancel()
	if err != nil {
		return unavailable("raise generator floor", err)
	}
	c.log.Warn("generator floor raised", "generator", generator, "floor", top+by)
	for _, kv := range g.Kvs {
		key := string(kv.Key)
		for attempt := 0; ; attempt++ {
			v, err := parseValue(kv.Value)
			if err != nil {
				return fmt.Errorf("etcd: reservation %s holds %q", key, kv.Value)
			}
			if v > math.MaxInt64-by {
				return fmt.Errorf("%w: bump of %s from %d by %d overflows", coordinator.ErrInvalidSpec, key, v, by)
			}
			cctx, cancel := c.call(ctx)
			resp, err := c.cli.Txn(cctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
				Then(clientv3.OpPut(key, pad(v+by))).
				Else(clientv3.OpGet(key)).Commit()
			cancel()
			if err != nil {
				return unavailable("bump", err)
			}
			if resp.Succeeded {
				c.log.Warn("reservation bumped", "generator", generator, "key", key, "from", v, "to", v+by)
				break
			}
			if attempt == 10 {
				return fmt.Errorf("%w: bump of %s: value kept changing", coordinator.ErrUnavailable, key)
			}
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) != 1 {
				break
			}
			kv = kvs[0]
		}
	}
	return nil
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
	slot, ok := parseSlot(name)
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

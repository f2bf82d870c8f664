package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// Acquire implements coordinator.Coordinator: the slot is chosen by
// coordinator.Plan over one consistent scan. It returns a
// *coordinator.RestoredError while the generator's restore marker stands,
// a *coordinator.LayoutMismatchError, *coordinator.ExhaustedError or
// *coordinator.NameInUseError (each matching its sentinel),
// coordinator.ErrSchemaTooNew, coordinator.ErrInvalidSpec for a bad Spec or
// node, or an error matching coordinator.ErrUnavailable.
func (c *Coordinator) Acquire(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if node.InstanceID == "" || node.Name == "" {
		return nil, fmt.Errorf("%w: NodeInfo needs a Name and an InstanceID (name %q, instance %q)",
			coordinator.ErrInvalidSpec, node.Name, node.InstanceID)
	}
	return coordinator.RetryAcquire(ctx, "etcd",
		func(ctx context.Context) (coordinator.Lease, error) { return c.acquireOnce(ctx, spec, node) },
		isPermanent, coordinator.SleepCtx)
}

// scanned is one consistent read of a generator's keys.
type scanned struct {
	pinRev    int64 // 0: no pin
	pin       pin
	cursor    uint64
	owners    map[string]ownerState
	reserved  map[string]resState
	floor     resState // the generator floor Bump sets (-1, mod revision 0: none)
	marker    *coordinator.RestoreEvidence
	markerRev int64 // the marker's mod revision (0: none)
	rev       int64
	ownerKeys []string
}

type ownerState struct {
	rec       ownerRecord
	createRev int64
	lease     clientv3.LeaseID
}

// resState is a reservation or the floor as scanned.
type resState = stored

func (c *Coordinator) scan(ctx context.Context, k keys) (*scanned, error) {
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).Then(
		clientv3.OpGet(k.pin()),
		clientv3.OpGet(k.cursor()),
		clientv3.OpGet(k.owners(), clientv3.WithPrefix()),
		clientv3.OpGet(k.reservations(), clientv3.WithPrefix()),
		clientv3.OpGet(k.floor()),
		clientv3.OpGet(k.restored()),
	).Commit()
	if err != nil {
		return nil, unavailable("scan", err)
	}
	s := &scanned{owners: map[string]ownerState{}, reserved: map[string]resState{}, floor: resState{value: -1}, rev: resp.Header.Revision}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if err := json.Unmarshal(kvs[0].Value, &s.pin); err != nil {
			return nil, fmt.Errorf("etcd: pin %s is not readable: %w", k.pin(), err)
		}
		s.pinRev = kvs[0].CreateRevision
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		v, err := parseKey(k.cursor(), kvs[0].Value)
		if err != nil {
			return nil, err
		}
		s.cursor = uint64(v)
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), k.owners())
		s.owners[name] = ownerState{rec: coordinator.DecodeOwner(kv.Value), createRev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}
		s.ownerKeys = append(s.ownerKeys, name)
	}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), k.reservations())
		v, err := parseKey(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		s.reserved[name] = resState{value: v, modRev: kv.ModRevision}
	}
	if s.floor, err = readStored(k.floor(), resp.Responses[4].GetResponseRange().Kvs); err != nil {
		return nil, err
	}
	if kvs := resp.Responses[5].GetResponseRange().Kvs; len(kvs) == 1 {
		ev, err := coordinator.DecodeRestore(k.restored(), kvs[0].Value)
		if err != nil {
			return nil, err
		}
		s.marker, s.markerRev = &ev, kvs[0].ModRevision
	}
	return s, nil
}

// reservedOf is R for a slot, -1 when never reserved.
func (s *scanned) reservedOf(name string) resState {
	if r, ok := s.reserved[name]; ok {
		return r
	}
	return resState{value: -1}
}

// createPin creates the pin, create-if-absent: of two first nodes exactly
// one wins. It returns coordinator.ErrRescan: the next scan checks the pin against the
// spec (Plan).
func (c *Coordinator) createPin(ctx context.Context, k keys, spec coordinator.Spec) error {
	want := coordinator.NewPin(spec)
	b, _ := json.Marshal(want)
	cctx, cancel := c.call(ctx)
	resp, err := c.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.pin()), "=", 0)).
		Then(clientv3.OpPut(k.pin(), string(b))).
		Commit()
	cancel()
	if err != nil {
		return unavailable("create pin", err)
	}
	if resp.Succeeded {
		c.log.Info("generator pinned", "generator", spec.Generator, "layout", spec.Layout,
			"datacenter", spec.Datacenter, "incarnation", want.Incarnation)
	}
	return coordinator.ErrRescan
}

// plan is the scan in the terms coordinator.Plan reads: owners in key
// order, every reservation read.
func (s *scanned) plan() coordinator.Scan {
	p := coordinator.Scan{Marker: s.marker, Cursor: s.cursor, Floor: s.floor.value,
		Reserved: make(map[coordinator.Slot]int64, len(s.reserved))}
	if s.pinRev != 0 {
		pin := s.pin
		p.Pin = &pin
	}
	for _, name := range s.ownerKeys {
		slot, ok := coordinator.ParseSlotKey(name)
		if !ok {
			continue
		}
		p.Owners = append(p.Owners, coordinator.Owner{Slot: slot, Record: s.owners[name].rec})
	}
	for name, r := range s.reserved {
		if slot, ok := coordinator.ParseSlotKey(name); ok {
			p.Reserved[slot] = r.value
		}
	}
	return p
}

func (c *Coordinator) acquireOnce(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	k := c.keys(spec.Generator)
	s, err := c.scan(ctx, k)
	if err != nil {
		return nil, err
	}
	// A standing marker is refused by the plan before the pin is looked
	// at; the take txn checks its absence again atomically.
	if s.marker == nil && s.pinRev == 0 {
		return nil, c.createPin(ctx, k, spec)
	}
	now, _ := c.clock.Now()
	if err := c.dropStrays(ctx, k, s, node); err != nil {
		return nil, err
	}
	sc := s.plan()
	var waiting []coordinator.Slot
	if s.marker == nil {
		sc.Retake, waiting = c.ended.Sort(spec, func(slot coordinator.Slot) coordinator.EndedOwner {
			o, owned := s.owners[slot.Key()]
			if !owned {
				return coordinator.EndedOwner{}
			}
			return coordinator.EndedOwner{Owned: true, Session: int64(o.lease)}
		})
	}
	cands, err := coordinator.Plan(spec, node, sc, now)
	if err != nil {
		return nil, err
	}
	sess, err := c.getSession(ctx)
	if err != nil {
		return nil, err
	}
	hb := coordinator.Heartbeat{Node: node, Wall: now}
	for _, cand := range cands {
		if len(waiting) > 0 && cand.Kind == coordinator.Free {
			// A free worker would serve at once and leave the ended
			// lease's worker, and the comparison a restore shows in,
			// untaken: wait for its owner key to go (or to age into a
			// take-back) instead.
			return nil, unavailable("acquire", coordinator.WaitingErr(waiting[0]))
		}
		l, err := c.take(ctx, k, s, spec, sess, cand, hb)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, errLostRace) {
			return nil, err
		}
	}
	return nil, coordinator.ErrRescan
}

// errLostRace: someone else changed the candidate slot first; try the next.
var errLostRace = errors.New("etcd: lost the race for a slot")

// candidate is one of the plan's candidates with what the take compares:
// the reservation as scanned and, for a take-back, the stale record.
type candidate struct {
	slot     coordinator.Slot
	pos      uint64 // cursor position; take-backs leave the cursor
	res      resState
	takeBack *ownerState
}

// take acquires one candidate slot: If(CreateRevision(owner)==0, the pin,
// the reservation and the generator floor unchanged since the scan) Then(Put(owner,
// lease), Get(reserved), advance the cursor). A take-back first deletes our
// own stale record, guarded by its create revision.
func (c *Coordinator) take(ctx context.Context, k keys, s *scanned, spec coordinator.Spec, sess *session,
	pc coordinator.Candidate, hb coordinator.Heartbeat) (*lease, error) {
	cand := candidate{slot: pc.Slot, pos: pc.Pos, res: s.reservedOf(pc.Slot.Key())}
	if pc.Kind == coordinator.TakeBack {
		o, ok := s.owners[pc.Slot.Key()]
		if !ok {
			return nil, errLostRace
		}
		cand.takeBack = &o
	}
	ownerKey, resKey := k.owner(cand.slot), k.reserved(cand.slot)
	ownerCmp := clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", 0)
	putOpt, guardLease, keptRev := clientv3.WithLease(sess.id), sess.id, int64(0)
	if cand.takeBack != nil {
		var err error
		if ownerCmp, putOpt, guardLease, keptRev, err = c.replaceStale(ctx, spec, ownerKey, cand.slot, cand.takeBack, sess); err != nil {
			return nil, err
		}
	}
	then := []clientv3.Op{
		clientv3.OpPut(ownerKey, newOwnerRecord(hb), putOpt),
		clientv3.OpGet(resKey),
	}
	if cand.takeBack == nil && pc.Kind != coordinator.Retake { // a take-back or a retake leaves the cursor alone
		then = append(then, raiseCursor(k.cursor(), int64(cand.pos+1)))
	}
	c.beginTake(ownerKey)
	registered := false
	defer func() {
		if !registered {
			c.endTake(ownerKey, 0)
		}
	}()
	cctx, cancel := c.call(ctx)
	resp, err := c.cli.Txn(cctx).
		If(ownerCmp,
			clientv3.Compare(clientv3.CreateRevision(k.pin()), "=", s.pinRev),
			clientv3.Compare(clientv3.ModRevision(resKey), "=", cand.res.modRev),
			clientv3.Compare(clientv3.ModRevision(k.floor()), "=", s.floor.modRev),
			clientv3.Compare(clientv3.CreateRevision(k.restored()), "=", 0)).
		Then(then...).
		Else(clientv3.OpGet(k.pin()), clientv3.OpGet(k.floor()), clientv3.OpGet(k.restored()), clientv3.OpGet(ownerKey)).
		Commit()
	cancel()
	if err != nil {
		if strings.Contains(err.Error(), "lease not found") {
			c.dropSession(sess)
			return nil, coordinator.ErrRescan
		}
		// The txn may still be applied, after a retry's scan has
		// looked: the session sweeps for strays from now on.
		sess.unsure.Store(true)
		return nil, unavailable("acquire", err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[3].GetResponseRange().Kvs; len(kvs) == 1 && clientv3.LeaseID(kvs[0].Lease) == sess.id {
			// The owner key is bound to this session already: an
			// earlier attempt of this very txn (the client library
			// repeats one whose call timed out while ctx lives) or an
			// earlier take given up on. Unless a lease holds it, it
			// is a stray: sweep now, and after each renewal.
			sess.unsure.Store(true)
			sess.askSweep()
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || kvs[0].CreateRevision != s.pinRev {
			return nil, coordinator.ErrRescan // the pin changed: check it again
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; (len(kvs) == 1 && kvs[0].ModRevision != s.floor.modRev) ||
			(len(kvs) == 0 && s.floor.modRev != 0) {
			return nil, coordinator.ErrRescan // a bump raised the generator floor: scan again
		}
		if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
			return nil, coordinator.ErrRescan // a restore marker was written: the scan reports it
		}
		return nil, errLostRace
	}
	res, err := readStored(resKey, resp.Responses[1].GetResponseRange().Kvs)
	rev := resp.Header.Revision
	if keptRev != 0 {
		rev = keptRev // the old record kept, with its revision
	}
	if err != nil {
		// Taken, but its reservation is unreadable: give the slot back
		// (guarded like every holder write) rather than leave it owned.
		c.deleteOwner(ctx, ownerKey, rev, guardLease)
		return nil, err
	}
	c.endTake(ownerKey, rev) // held from here on, before the lease can end
	registered = true
	c.ended.Forget(spec.Generator, cand.slot)
	l := newLease(c, spec, k, cand.slot, sess, guardLease, rev, res, s.floor.value, s.pin.Incarnation)
	c.log.Info("worker acquired", "generator", spec.Generator, "slot", cand.slot.String(),
		"reserved", res.value, "floor", l.Floor(), "revision", rev, "take_back", cand.takeBack != nil, "again", pc.Kind == coordinator.Retake)
	return l, nil
}

// dropSession forgets a session the server no longer knows.
func (c *Coordinator) dropSession(s *session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
	s.stop()
}

// beginTake marks an acquisition of ownerKey as in flight: until endTake,
// dropStrays leaves the key alone.
func (c *Coordinator) beginTake(ownerKey string) {
	c.mu.Lock()
	c.pending[ownerKey]++
	c.mu.Unlock()
}

// endTake ends an acquisition of ownerKey; rev > 0 records the lease that
// now holds it (created at rev), in the same step.
func (c *Coordinator) endTake(ownerKey string, rev int64) {
	c.mu.Lock()
	if rev > 0 {
		c.held[ownerKey] = rev
	}
	if c.pending[ownerKey]--; c.pending[ownerKey] <= 0 {
		delete(c.pending, ownerKey)
	}
	c.mu.Unlock()
}

// forget drops a lease that ended from the held set.
func (c *Coordinator) forget(ownerKey string, rev int64) {
	c.mu.Lock()
	if c.held[ownerKey] == rev {
		delete(c.held, ownerKey)
	}
	c.mu.Unlock()
}

// isStray reports whether an owner key bound to this coordinator's
// current etcd lease is held by no lease object and by no acquisition in
// flight.
func (c *Coordinator) isStray(ownerKey string, createRev int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	rev, held := c.held[ownerKey]
	return c.pending[ownerKey] == 0 && (!held || rev != createRev)
}

// currentSession is the live session, nil if there is none (it grants
// nothing).
func (c *Coordinator) currentSession() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sess
	if s == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
		return s
	}
}

// dropStrays deletes the owner keys of generator that carry this node's
// instance ID and are bound to this coordinator's live etcd lease, but
// that no lease of it holds: a take txn whose reply was lost (a timeout, a
// broken connection) may have been applied, and its key would otherwise
// keep the worker until the etcd lease ends. Each delete is guarded by the
// key's create revision and lease, so a key taken meanwhile stays. The
// slots are dropped from s and so become candidates again.
func (c *Coordinator) dropStrays(ctx context.Context, k keys, s *scanned, node coordinator.NodeInfo) error {
	sess := c.currentSession()
	if sess == nil {
		return nil
	}
	kept := s.ownerKeys[:0]
	for _, name := range s.ownerKeys {
		o := s.owners[name]
		key := k.owners() + name
		if o.lease != sess.id || o.rec.Instance != node.InstanceID || !c.isStray(key, o.createRev) {
			kept = append(kept, name)
			continue
		}
		cctx, cancel := c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", o.createRev),
				clientv3.Compare(clientv3.LeaseValue(key), "=", sess.id)).
			Then(clientv3.OpDelete(key)).
			Commit()
		cancel()
		if err != nil {
			return unavailable("delete stray owner key", err)
		}
		if !resp.Succeeded {
			kept = append(kept, name) // changed meanwhile: not ours to judge
			continue
		}
		delete(s.owners, name)
		c.log.Warn("deleted an owner key of this node that no lease holds (an acquisition whose reply was lost)",
			"key", key, "revision", o.createRev)
	}
	s.ownerKeys = kept
	return nil
}

// sweepStrays deletes the owner keys bound to session s that no lease of
// this coordinator holds and no acquisition has in flight (isStray): a
// take txn given up on that the server applied after the retry's scan
// (dropStrays, in the next Acquire, comes too late for a node that holds
// what it needs and acquires no more). It runs after each renewal of a
// session in which a take's outcome was unknown (session.unsure); each
// delete is guarded by the key's create revision and lease, as in
// dropStrays. Best effort: a failed read or delete waits for the next
// renewal.
func (c *Coordinator) sweepStrays(ctx context.Context, s *session) {
	cctx, cancel := c.call(ctx)
	ttl, err := c.cli.TimeToLive(cctx, s.id, clientv3.WithAttachedKeys())
	cancel()
	if err != nil {
		return
	}
	for _, b := range ttl.Keys {
		key := string(b)
		if !strings.HasPrefix(key, c.root) || !strings.Contains(strings.TrimPrefix(key, c.root), "/owner/") {
			continue
		}
		c.mu.Lock()
		_, held := c.held[key]
		busy := held || c.pending[key] > 0
		c.mu.Unlock()
		if busy {
			continue
		}
		cctx, cancel := c.call(ctx)
		g, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil || len(g.Kvs) != 1 || clientv3.LeaseID(g.Kvs[0].Lease) != s.id || !c.isStray(key, g.Kvs[0].CreateRevision) {
			continue
		}
		rev := g.Kvs[0].CreateRevision
		cctx, cancel = c.call(ctx)
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev),
				clientv3.Compare(clientv3.LeaseValue(key), "=", s.id)).
			Then(clientv3.OpDelete(key)).
			Commit()
		cancel()
		if err == nil && resp.Succeeded {
			c.log.Warn("deleted an owner key of this node that no lease holds (an acquisition whose reply was lost)",
				"key", key, "revision", rev)
		}
	}
}

// sweeper runs sweepStrays each time keepAlive asks (s.sweep), until the
// session ends or ctx does.
func (c *Coordinator) sweeper(ctx context.Context, s *session) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-s.sweep:
			c.sweepStrays(ctx, s)
		}
	}
}

// deleteOwner deletes ownerKey guarded like a holder write (best effort).
func (c *Coordinator) deleteOwner(ctx context.Context, ownerKey string, rev int64, lease clientv3.LeaseID) {
	cctx, cancel := c.call(ctx)
	defer cancel()
	_, _ = c.cli.Txn(cctx).If(ownerGuard(ownerKey, rev, lease)...).Then(clientv3.OpDelete(ownerKey)).Commit()
}

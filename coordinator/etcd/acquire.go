package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// maxAttempts bounds Acquire's retries after unavailability or lost races;
// the caller's context bounds its time.
const maxAttempts = 30

// errRescan asks acquire's loop for a fresh scan at once.
var errRescan = errors.New("etcd: rescan")

// Acquire implements coordinator.Coordinator. It returns a
// *coordinator.LayoutMismatchError, *coordinator.ExhaustedError or
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
	var last error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		l, err := c.acquireOnce(ctx, spec, node)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, errRescan):
			continue
		case !errors.Is(err, coordinator.ErrUnavailable) || isPermanent(err):
			return nil, err
		}
		last = err
		wait := min(50*time.Millisecond<<attempt, 500*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
		case <-time.After(wait):
		}
	}
	if last == nil {
		last = fmt.Errorf("%w: etcd acquire: %d attempts lost races", coordinator.ErrUnavailable, maxAttempts)
	}
	return nil, last
}

// scanned is one consistent read of a generator's keys.
type scanned struct {
	pinRev    int64 // 0: no pin
	pin       pin
	cursor    uint64
	owners    map[string]ownerState
	reserved  map[string]resState
	floor     resState // the generator floor Bump sets (-1, mod revision 0: none)
	rev       int64
	ownerKeys []string
}

type ownerState struct {
	rec       ownerRecord
	createRev int64
	lease     clientv3.LeaseID
}

type resState struct {
	value  int64
	modRev int64
}

func (c *Coordinator) scan(ctx context.Context, k keys) (*scanned, error) {
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).Then(
		clientv3.OpGet(k.pin()),
		clientv3.OpGet(k.cursor()),
		clientv3.OpGet(k.owners(), clientv3.WithPrefix()),
		clientv3.OpGet(k.reservations(), clientv3.WithPrefix()),
		clientv3.OpGet(k.floor()),
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
		v, err := parseValue(kvs[0].Value)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("etcd: cursor %s holds %q", k.cursor(), kvs[0].Value)
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
		v, err := parseValue(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("etcd: reservation %s holds %q: refusing to guess", kv.Key, kv.Value)
		}
		s.reserved[name] = resState{value: v, modRev: kv.ModRevision}
	}
	if kvs := resp.Responses[4].GetResponseRange().Kvs; len(kvs) == 1 {
		v, err := parseValue(kvs[0].Value)
		if err != nil {
			return nil, fmt.Errorf("etcd: generator floor %s holds %q: refusing to guess", k.floor(), kvs[0].Value)
		}
		s.floor = resState{value: v, modRev: kvs[0].ModRevision}
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

// ensurePin creates the pin if absent (create-if-absent: of two first
// nodes exactly one wins), then checks it against spec.
func (c *Coordinator) ensurePin(ctx context.Context, k keys, s *scanned, spec coordinator.Spec) error {
	if s.pinRev == 0 {
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
		return errRescan
	}
	return s.pin.Check(spec)
}

type candidate struct {
	slot     coordinator.Slot
	pos      uint64 // cursor position; takeBack candidates leave the cursor
	res      resState
	takeBack *ownerState
}

func (c *Coordinator) acquireOnce(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	k := c.keys(spec.Generator)
	s, err := c.scan(ctx, k)
	if err != nil {
		return nil, err
	}
	if err := c.ensurePin(ctx, k, s, spec); err != nil {
		return nil, err
	}
	now, _ := c.clock.Now()

	// The node name is a label: refuse while another instance holds it.
	for _, name := range s.ownerKeys {
		o := s.owners[name]
		if o.rec.Name == node.Name && o.rec.Instance != node.InstanceID {
			slot, _ := parseSlot(name)
			return nil, &coordinator.NameInUseError{Name: node.Name, Slot: slot, Instance: o.rec.Instance, Address: o.rec.Address}
		}
	}

	// Our own stale records first (a restart before the old lease ran
	// out), then free slots in cursor order.
	var cands []candidate
	n := spec.Slots()
	takeBackLimit := max(spec.MaxFloor, spec.LocalFloor)
	for i := uint64(0); i < n; i++ {
		slot := spec.SlotAt(i)
		name := slotName(slot)
		o, owned := s.owners[name]
		if !owned || o.rec.Instance != node.InstanceID || now.Sub(o.rec.Wall) <= coordinator.TakeBackAge {
			continue
		}
		if r := s.reservedOf(name); max(r.value, s.floor.value) <= takeBackLimit {
			cands = append(cands, candidate{slot: slot, res: r, takeBack: &o})
		}
	}
	tooFar := 0
	for i := uint64(0); i < n; i++ {
		pos := s.cursor + i
		slot := spec.SlotAt(pos)
		name := slotName(slot)
		if _, owned := s.owners[name]; owned {
			continue
		}
		r := s.reservedOf(name)
		if max(r.value, s.floor.value) > spec.MaxFloor {
			tooFar++
			continue
		}
		cands = append(cands, candidate{slot: slot, pos: pos, res: r})
	}
	if len(cands) == 0 {
		return nil, c.exhausted(spec, s, n, tooFar)
	}

	sess, err := c.getSession(ctx)
	if err != nil {
		return nil, err
	}
	hb := coordinator.Heartbeat{Node: node, Wall: now}
	for _, cand := range cands {
		l, err := c.take(ctx, k, s, spec, sess, cand, hb)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, errLostRace) {
			return nil, err
		}
	}
	return nil, errRescan
}

// errLostRace: someone else changed the candidate slot first; try the next.
var errLostRace = errors.New("etcd: lost the race for a slot")

// take acquires one candidate slot: If(CreateRevision(owner)==0, the pin,
// the reservation and the generator floor unchanged since the scan) Then(Put(owner,
// lease), Get(reserved), advance the cursor). A take-back first deletes our
// own stale record, guarded by its create revision.
func (c *Coordinator) take(ctx context.Context, k keys, s *scanned, spec coordinator.Spec, sess *session,
	cand candidate, hb coordinator.Heartbeat) (*lease, error) {
	ownerKey, resKey := k.owner(cand.slot), k.reserved(cand.slot)
	ownerCmp := clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", 0)
	if cand.takeBack != nil {
		if weakFence {
			// firn_weakfence: a Put over the old record, keeping its
			// create revision (what the strong fence exists to prevent).
			ownerCmp = clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", cand.takeBack.createRev)
		} else {
			cctx, cancel := c.call(ctx)
			resp, err := c.cli.Txn(cctx).
				If(clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", cand.takeBack.createRev)).
				Then(clientv3.OpDelete(ownerKey)).
				Commit()
			cancel()
			if err != nil {
				return nil, unavailable("take back", err)
			}
			if !resp.Succeeded {
				return nil, errLostRace
			}
			c.log.Info("took back own stale worker", "generator", spec.Generator, "slot", cand.slot.String(),
				"old_revision", cand.takeBack.createRev)
		}
	}
	putOpt, guardLease := clientv3.WithLease(sess.id), sess.id
	if cand.takeBack != nil && weakFence {
		// The weak take-back keeps the old record's lease as well as its
		// create revision, so the old holder's weak guard still passes.
		putOpt, guardLease = clientv3.WithIgnoreLease(), cand.takeBack.lease
	}
	then := []clientv3.Op{
		clientv3.OpPut(ownerKey, newOwnerRecord(hb), putOpt),
		clientv3.OpGet(resKey),
	}
	if cand.takeBack == nil {
		then = append(then, raiseTo(k.cursor(), int64(cand.pos+1)))
	}
	cctx, cancel := c.call(ctx)
	resp, err := c.cli.Txn(cctx).
		If(ownerCmp,
			clientv3.Compare(clientv3.CreateRevision(k.pin()), "=", s.pinRev),
			clientv3.Compare(clientv3.ModRevision(resKey), "=", cand.res.modRev),
			clientv3.Compare(clientv3.ModRevision(k.floor()), "=", s.floor.modRev)).
		Then(then...).
		Else(clientv3.OpGet(k.pin()), clientv3.OpGet(k.floor())).
		Commit()
	cancel()
	if err != nil {
		if strings.Contains(err.Error(), "lease not found") {
			c.dropSession(sess)
			return nil, errRescan
		}
		return nil, unavailable("acquire", err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || kvs[0].CreateRevision != s.pinRev {
			return nil, errRescan // the pin changed: check it again
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; (len(kvs) == 1 && kvs[0].ModRevision != s.floor.modRev) ||
			(len(kvs) == 0 && s.floor.modRev != 0) {
			return nil, errRescan // a bump raised the generator floor: scan again
		}
		return nil, errLostRace
	}
	readR := int64(-1)
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		v, err := parseValue(kvs[0].Value)
		if err != nil {
			return nil, fmt.Errorf("etcd: reservation %s holds %q: refusing to guess", resKey, kvs[0].Value)
		}
		readR = v
	}
	rev := resp.Header.Revision
	if cand.takeBack != nil && weakFence {
		rev = cand.takeBack.createRev
	}
	l := newLease(c, spec, k, cand.slot, sess, guardLease, rev, readR, s.floor.value, s.pin.Incarnation)
	c.log.Info("worker acquired", "generator", spec.Generator, "slot", cand.slot.String(),
		"reserved", readR, "floor", l.floor, "revision", rev, "take_back", cand.takeBack != nil)
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

func (c *Coordinator) exhausted(spec coordinator.Spec, s *scanned, n uint64, tooFar int) error {
	e := &coordinator.ExhaustedError{Generator: spec.Generator, Limit: n, TooFar: tooFar}
	if s.floor.value > spec.MaxFloor {
		e.Floor = s.floor.value
	}
	for _, name := range s.ownerKeys {
		slot, ok := parseSlot(name)
		if !ok {
			continue
		}
		o := s.owners[name]
		e.Live = append(e.Live, coordinator.Holder{Slot: slot, Live: true, Heartbeat: o.rec.Heartbeat(),
			Reserved: s.reservedOf(name).value})
	}
	return e
}

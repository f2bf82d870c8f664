package zookeeper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
)

var (
	// errLostRace: someone else took the candidate slot first.
	errLostRace = errors.New("zookeeper: lost the race for a slot")
	// errTooFar: the candidate's reservation is past the taker's limit.
	errTooFar = errors.New("zookeeper: reservation past max-lead")
)

// Acquire implements coordinator.Coordinator: the slot is chosen by
// coordinator.Plan over a scan that leaves reservation values to the take.
// It returns a
// *coordinator.RestoredError while the generator's restore marker stands,
// a *coordinator.LayoutMismatchError, *coordinator.ExhaustedError or
// *coordinator.NameInUseError (each matching its sentinel),
// coordinator.ErrSchemaTooNew, coordinator.ErrInvalidSpec for a bad Spec or
// node, or an error matching coordinator.ErrUnavailable.
func (c *Coordinator) Acquire(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if !validNodeName(spec.Generator) {
		return nil, fmt.Errorf("%w: Spec.Generator %q is not a valid ZooKeeper node name", coordinator.ErrInvalidSpec, spec.Generator)
	}
	if node.InstanceID == "" || node.Name == "" {
		return nil, fmt.Errorf("%w: NodeInfo needs a Name and an InstanceID (name %q, instance %q)",
			coordinator.ErrInvalidSpec, node.Name, node.InstanceID)
	}
	return coordinator.RetryAcquire(ctx, "zookeeper",
		func(ctx context.Context) (coordinator.Lease, error) {
			if c.isClosed() {
				return nil, fmt.Errorf("%w: zookeeper coordinator closed", coordinator.ErrUnavailable)
			}
			return c.acquireOnce(ctx, spec, node)
		},
		func(err error) bool { return isPermanent(err) || c.isClosed() }, coordinator.SleepCtx)
}

func (c *Coordinator) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// ownerState is one live owner node as read in a scan.
type ownerState struct {
	rec  ownerRecord
	stat *zk.Stat
}

// scanned is what Acquire read of a generator. Unlike etcd there is no
// single consistent read: every decision taken from it is re-checked by
// the versions in the acquiring multi.
type scanned struct {
	pin        pin
	pinVersion int32
	start      uint64 // cursor position the walk starts at
	cursorVal  uint64 // cursor value to raise from (may grow on retries)
	cursorVer  int32
	floor      int64 // the generator floor Bump sets (-1: none)
	floorVer   int32
	owners     map[string]ownerState
	ownerNames []string
	reserved   map[string]bool
	marker     *coordinator.RestoreEvidence // when set, the scan stopped there
}

// plan is the scan in the terms coordinator.Plan reads: owners in name
// order (OwnSession: an ephemeral node of session sid), reservation values
// unread (the take reads each), and the given-up slots to retake.
func (s *scanned) plan(sid int64, retake []coordinator.Slot) coordinator.Scan {
	p := coordinator.Scan{Marker: s.marker, Cursor: s.start, Floor: s.floor, Unread: map[coordinator.Slot]bool{}, Retake: retake}
	if s.marker != nil {
		return p
	}
	pin := s.pin
	p.Pin = &pin
	for _, name := range s.ownerNames {
		slot, ok := coordinator.ParseSlotKey(name)
		if !ok {
			continue
		}
		o := s.owners[name]
		p.Owners = append(p.Owners, coordinator.Owner{Slot: slot, Record: o.rec, OwnSession: o.stat.EphemeralOwner == sid})
	}
	for name := range s.reserved {
		if slot, ok := coordinator.ParseSlotKey(name); ok {
			p.Unread[slot] = true
		}
	}
	return p
}

// scan reads the pin (creating it if absent: of two first nodes exactly one
// wins), the cursor, the live owners and the set of reservation nodes.
func (c *Coordinator) scan(ctx context.Context, p paths, spec coordinator.Spec) (*scanned, error) {
	if err := c.ensureGenerator(ctx, p); err != nil {
		return nil, err
	}
	// A standing restore marker refuses every acquisition of the
	// generator, a node with an empty data dir included (the plan says
	// so; the acquiring multi checks it again atomically, markerAbsentOps):
	// nothing more needs reading.
	if ev, err := c.readMarker(ctx, p); err != nil {
		return nil, err
	} else if ev != nil {
		return &scanned{marker: ev}, nil
	}
	s, err := c.readPin(ctx, p, spec)
	if err != nil {
		return nil, err
	}
	if s.pin.Check(spec) != nil {
		return s, nil // the plan refuses it: nothing more needs reading
	}

	data, st, err := c.get(ctx, p.cursor())
	if errors.Is(err, zk.ErrNoNode) {
		if err := c.create(ctx, p.cursor(), encodeValue(0), zk.FlagPersistent); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return nil, unavailable("create cursor", err)
		}
		return nil, coordinator.ErrRescan
	}
	if err != nil {
		return nil, unavailable("read cursor", err)
	}
	cur, err := parsePath(p.cursor(), data)
	if err != nil {
		return nil, err
	}
	if cur < 0 {
		return nil, fmt.Errorf("zookeeper: cursor %s holds %q", p.cursor(), data)
	}
	s.start, s.cursorVal, s.cursorVer = uint64(cur), uint64(cur), st.Version

	// The generator floor node is created once (-1: no floor) so that every
	// acquiring multi can check its version.
	data, st, err = c.get(ctx, p.floor())
	if errors.Is(err, zk.ErrNoNode) {
		if err := c.create(ctx, p.floor(), neverReserved, zk.FlagPersistent); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return nil, unavailable("create generator floor", err)
		}
		return nil, coordinator.ErrRescan
	}
	if err != nil {
		return nil, unavailable("read generator floor", err)
	}
	if s.floor, err = parsePath(p.floor(), data); err != nil {
		return nil, err
	}
	s.floorVer = st.Version

	if err := c.readOwners(ctx, p, s); err != nil {
		return nil, err
	}
	return s, nil
}

// readPin reads the generator's pin into a new scanned; it creates the pin
// when absent (of two first nodes exactly one wins) and asks for a rescan.
func (c *Coordinator) readPin(ctx context.Context, p paths, spec coordinator.Spec) (*scanned, error) {
	data, st, err := c.get(ctx, p.pin())
	if errors.Is(err, zk.ErrNoNode) {
		want := coordinator.NewPin(spec)
		b, _ := json.Marshal(want)
		err := c.create(ctx, p.pin(), b, zk.FlagPersistent)
		switch {
		case err == nil:
			c.log.Info("generator pinned", "generator", spec.Generator, "layout", spec.Layout,
				"datacenter", spec.Datacenter, "incarnation", want.Incarnation)
		case errors.Is(err, zk.ErrNodeExists):
		case errors.Is(err, zk.ErrNoNode):
			c.forgetGenerator(p) // its nodes were deleted behind our back
			return nil, coordinator.ErrRescan
		default:
			return nil, unavailable("create pin", err)
		}
		return nil, coordinator.ErrRescan
	}
	if err != nil {
		return nil, unavailable("read pin", err)
	}
	s := &scanned{pinVersion: st.Version, owners: map[string]ownerState{}, reserved: map[string]bool{}}
	if err := json.Unmarshal(data, &s.pin); err != nil {
		return nil, fmt.Errorf("zookeeper: pin %s is not readable: %w", p.pin(), err)
	}
	return s, nil
}

// readOwners reads the generator's live owners into s (an orphan, left by
// an ended session, is dropped) and the names of its reservation nodes.
func (c *Coordinator) readOwners(ctx context.Context, p paths, s *scanned) error {
	names, err := c.children(ctx, p.owners())
	if errors.Is(err, zk.ErrNoNode) {
		c.forgetGenerator(p)
		return coordinator.ErrRescan
	}
	if err != nil {
		return unavailable("list owners", err)
	}
	sort.Strings(names)
	for _, name := range names {
		d, st, err := c.get(ctx, p.owners()+"/"+name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return unavailable("read owner", err)
		}
		if c.dropOrphan(ctx, p.owners()+"/"+name, d, st) {
			continue
		}
		s.owners[name] = ownerState{rec: decodeOwner(d), stat: st}
		s.ownerNames = append(s.ownerNames, name)
	}
	res, err := c.children(ctx, p.reservations())
	if err != nil {
		return unavailable("list reservations", err)
	}
	for _, name := range res {
		s.reserved[name] = true
	}
	return nil
}

type candidate struct {
	slot     coordinator.Slot
	pos      uint64 // cursor position; take-backs leave the cursor alone
	limit    int64  // largest R accepted
	takeBack *ownerState
	// again: a slot held in a session of this coordinator that ended
	// (see sessionEnded), taken again; it leaves the cursor alone.
	again bool
}

func (c *Coordinator) acquireOnce(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	p := c.paths(spec.Generator)
	s, err := c.scan(ctx, p, spec)
	if err != nil {
		return nil, err
	}
	sid := c.sid.Load()
	if sid == 0 && s.marker == nil {
		return nil, unavailable("acquire", errors.New("no session"))
	}
	now, _ := c.clock.Now()
	var retake, waiting []coordinator.Slot
	if s.marker == nil {
		retake, waiting = c.ended.Sort(spec, func(slot coordinator.Slot) coordinator.EndedOwner {
			o, owned := s.owners[slot.Key()]
			if !owned {
				return coordinator.EndedOwner{}
			}
			return coordinator.EndedOwner{Owned: true, Session: o.stat.EphemeralOwner}
		})
	}
	scan := s.plan(sid, retake)
	cands, err := coordinator.Plan(spec, node, scan, now)
	if err != nil {
		var ex *coordinator.ExhaustedError
		if errors.As(err, &ex) {
			if rerr := c.readLive(ctx, p, ex); rerr != nil {
				return nil, rerr
			}
		}
		return nil, err
	}
	rec := encodeOwner(coordinator.Heartbeat{Node: node, Wall: now})
	tooFar := 0
	for _, pc := range cands {
		if pc.Kind == coordinator.Free {
			if len(waiting) > 0 {
				// A free worker would serve at once and leave the ended
				// session's slot, and the comparison a restore shows in,
				// untaken: wait for that session's owner node to go (or
				// to age into a take-back) instead.
				return nil, unavailable("acquire", coordinator.WaitingErr(waiting[0]))
			}
			if err := ctx.Err(); err != nil {
				return nil, unavailable("acquire", err)
			}
		}
		cand := candidate{slot: pc.Slot, pos: pc.Pos, limit: pc.Limit, again: pc.Kind == coordinator.Retake}
		if pc.Kind == coordinator.TakeBack {
			o, ok := s.owners[pc.Slot.Key()]
			if !ok {
				continue // listed under a name not in the canonical form
			}
			cand.takeBack = &o
		}
		l, err := c.take(ctx, p, s, spec, cand, rec, sid)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, errLostRace), errors.Is(err, errTooFar):
			if pc.Kind == coordinator.Retake {
				c.ended.Forget(spec.Generator, pc.Slot)
			}
			if pc.Kind == coordinator.Free && errors.Is(err, errTooFar) {
				tooFar++
			}
		default:
			return nil, err
		}
	}
	ex := coordinator.Exhausted(spec, scan, tooFar)
	if err := c.readLive(ctx, p, ex); err != nil {
		return nil, err
	}
	return nil, ex
}

// take acquires one candidate in one multi: the pin's version unchanged,
// (for a take-back) the old owner node deleted at its version, once it was
// found to be still the record the scan read (its creation zxid), the
// ephemeral owner node created, the reservation rewritten with the exact
// bytes and version just read, and the cursor raised past the slot.
func (c *Coordinator) take(ctx context.Context, p paths, s *scanned, spec coordinator.Spec,
	cand candidate, rec []byte, sid int64) (*lease, error) {
	ownerPath, resPath := p.owner(cand.slot), p.reserved(cand.slot)
	for round := 0; round < 8; round++ {
		data, st, err := c.get(ctx, resPath)
		if errors.Is(err, zk.ErrNoNode) {
			// First use of the slot: its reservation node is created
			// once, never deleted.
			if err := c.create(ctx, resPath, neverReserved, zk.FlagPersistent); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return nil, unavailable("create reservation", err)
			}
			continue
		}
		if err != nil {
			return nil, unavailable("read reservation", err)
		}
		r, err := parsePath(resPath, data)
		if err != nil {
			return nil, err
		}
		if max(r, s.floor) > cand.limit {
			return nil, errTooFar
		}
		if c.afterRead != nil {
			c.afterRead(cand.slot)
		}
		if cand.takeBack != nil && takeBackReusesOwner {
			return c.adoptOwner(ctx, p, spec, s, cand, sid, r, data)
		}
		if cand.takeBack != nil {
			// The record the scan read, and no other: read after the
			// reservation, an owner node with its creation zxid is
			// still that record, and one created after this read (by
			// a take, which rewrites the reservation) fails the multi
			// on the reservation's version. The owner node's version
			// alone would not tell: a node created anew starts again
			// at 0 and may have reached the version the scan read.
			ost, err := c.exists(ctx, ownerPath)
			if err != nil {
				return nil, unavailable("read owner", err)
			}
			if ost == nil || ost.Czxid != cand.takeBack.stat.Czxid {
				return nil, errLostRace
			}
		}

		ops := []any{&zk.CheckVersionRequest{Path: p.pin(), Version: s.pinVersion},
			&zk.CheckVersionRequest{Path: p.floor(), Version: s.floorVer}}
		ops = append(ops, c.markerAbsentOps(p)...)
		ownerIdx := len(ops)
		if cand.takeBack != nil {
			ops = append(ops, &zk.DeleteRequest{Path: ownerPath, Version: cand.takeBack.stat.Version})
		}
		ops = append(ops, &zk.CreateRequest{Path: ownerPath, Data: rec, Acl: c.acl, Flags: zk.FlagEphemeral})
		createIdx := len(ops) - 1
		resIdx, curIdx := -1, -1
		if op := acquireReservedOp(resPath, data, st.Version); op != nil {
			resIdx = len(ops)
			ops = append(ops, op)
		}
		if cand.takeBack == nil && !cand.again {
			curIdx = len(ops)
			ops = append(ops, &zk.SetDataRequest{Path: p.cursor(),
				Data: encodeValue(int64(max(s.cursorVal, cand.pos+1))), Version: s.cursorVer})
		}
		next := c.nextHandshake()
		res, err := c.multi(ctx, ops)
		if err == nil && c.sid.Load() != sid {
			// Applied, but on the client of a later session (the one
			// planned in was given up or expired meanwhile): the owner
			// node belongs to the current session, and no lease would
			// hold it. The next scan deletes it; the slot, if lost,
			// stays to be taken again.
			c.addOrphan(ownerPath, rec)
			return nil, coordinator.ErrRescan
		}
		if err == nil && resIdx >= 0 {
			// All ops of a multi share one zxid: the owner node's
			// creation zxid is the reservation's new Mzxid.
			rst := res[resIdx].Stat
			l := newLease(c, spec, p, cand.slot, sid, rst.Mzxid, 0, rst.Version, r, s.floor, data, s.pin.Incarnation)
			return c.started(l, cand), nil
		}
		if err == nil {
			return c.confirmTake(ctx, p, spec, s, cand, rec, sid, r)
		}
		if isPermanent(err) {
			return nil, unavailable("acquire", err)
		}
		i := failedOp(res)
		switch {
		case i < 0:
			// No answer: the multi may or may not have been applied.
			// Read it back on the client's next connection when this one
			// was lost (awaitConnection; ctx's end is confirmTake's).
			c.awaitConnection(ctx, next, err)
			return c.confirmTake(ctx, p, spec, s, cand, rec, sid, r)
		case i == 0:
			return nil, coordinator.ErrRescan // the pin changed: check it again
		case i == 1:
			return nil, coordinator.ErrRescan // a bump raised the generator floor
		case i < ownerIdx:
			return nil, coordinator.ErrRescan // a restore marker stands: the scan reports it
		case i >= ownerIdx && i <= createIdx:
			return nil, errLostRace
		case i == resIdx:
			continue // the reservation moved since it was read: read again
		case i == curIdx:
			d, cst, err := c.get(ctx, p.cursor())
			if err != nil {
				return nil, unavailable("read cursor", err)
			}
			if v, err := parseValue(d); err == nil && v >= 0 {
				s.cursorVal = max(s.cursorVal, uint64(v))
			}
			s.cursorVer = cst.Version
			continue
		default:
			return nil, unavailable("acquire", err)
		}
	}
	return nil, errLostRace
}

// confirmTake decides the outcome of an acquiring multi from what is
// stored: it was applied if the owner node holds exactly the record sent
// and belongs to this session. (The weak fence uses it after every
// success too, having no reservation write to learn versions from.) The
// reservation is read before the owner node: an owner node that is still
// this one proves the reservation was not touched by another holder.
func (c *Coordinator) confirmTake(ctx context.Context, p paths, spec coordinator.Spec, s *scanned,
	cand candidate, rec []byte, sid int64, readR int64) (*lease, error) {
	ownerPath, resPath := p.owner(cand.slot), p.reserved(cand.slot)
	var rdata, odata []byte
	var rst, ost *zk.Stat
	var rerr, oerr error
	for round := 0; round < maxWriteRounds; round++ {
		next := c.nextHandshake()
		rdata, rst, rerr = c.get(ctx, resPath)
		if rerr == nil {
			odata, ost, oerr = c.get(ctx, ownerPath)
		}
		if rerr == nil && (oerr == nil || errors.Is(oerr, zk.ErrNoNode)) {
			break
		}
		if !c.awaitConnection(ctx, next, errors.Join(rerr, oerr)) {
			break
		}
	}
	if rerr != nil || (oerr != nil && !errors.Is(oerr, zk.ErrNoNode)) {
		c.addOrphan(ownerPath, rec)
		return nil, unavailable("acquire: outcome unknown", errors.Join(rerr, oerr))
	}
	if oerr == nil && ost.EphemeralOwner != sid && bytes.Equal(odata, rec) {
		c.addOrphan(ownerPath, rec) // applied in a later session: no lease holds it
	}
	if oerr != nil || ost.EphemeralOwner != sid || !bytes.Equal(odata, rec) {
		return nil, coordinator.ErrRescan // not applied (or applied and already gone)
	}
	l := newLease(c, spec, p, cand.slot, sid, ost.Czxid, ost.Version, rst.Version, readR, s.floor, rdata, s.pin.Incarnation)
	return c.started(l, cand), nil
}

// adoptOwner is the weak fence's take-back (build tag firn_weakfence
// only): it keeps the old owner node and its version.
func (c *Coordinator) adoptOwner(ctx context.Context, p paths, spec coordinator.Spec, s *scanned,
	cand candidate, sid int64, readR int64, data []byte) (*lease, error) {
	tb := cand.takeBack.stat
	_, err := c.multi(ctx, append([]any{
		&zk.CheckVersionRequest{Path: p.pin(), Version: s.pinVersion},
		&zk.CheckVersionRequest{Path: p.owner(cand.slot), Version: tb.Version},
	}, c.markerAbsentOps(p)...))
	if err != nil {
		return nil, errLostRace
	}
	_, rst, err := c.get(ctx, p.reserved(cand.slot))
	if err != nil {
		return nil, unavailable("read reservation", err)
	}
	l := newLease(c, spec, p, cand.slot, sid, tb.Czxid, tb.Version, rst.Version, readR, s.floor, data, s.pin.Incarnation)
	l.owner = tb.EphemeralOwner
	return c.started(l, cand), nil
}

func (c *Coordinator) started(l *lease, cand candidate) *lease {
	if c.afterTake != nil {
		c.afterTake(l.Slot())
	}
	c.register(l)
	c.log.Info("worker acquired", "generator", l.Spec().Generator, "slot", l.Slot().String(),
		"reserved", l.ReadReserved(), "floor", l.Floor(), "session", fmt.Sprintf("%#x", l.session),
		"take_back", cand.takeBack != nil, "again", cand.again)
	return l
}

// addOrphan remembers an owner node an unanswered acquisition may have
// created in this session: no lease knows it, so the next scan deletes it
// rather than leave the slot blocked until the session ends.
func (c *Coordinator) addOrphan(path string, rec []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.orphans == nil {
		c.orphans = map[string][]byte{}
	}
	c.orphans[path] = rec
}

// dropOrphan deletes an owner node recorded by addOrphan if it exists in
// this session with the record sent and no lease holds it. It reports
// whether the node is gone.
func (c *Coordinator) dropOrphan(ctx context.Context, path string, data []byte, st *zk.Stat) bool {
	c.mu.Lock()
	rec, ok := c.orphans[path]
	c.mu.Unlock()
	if !ok {
		return false
	}
	if st.EphemeralOwner != c.sid.Load() || !bytes.Equal(rec, data) || c.liveOwnerNodes()[st.Czxid] {
		c.mu.Lock()
		delete(c.orphans, path)
		c.mu.Unlock()
		return false
	}
	_, err := call(c, ctx, func() (struct{}, error) { return struct{}{}, c.client().Delete(path, st.Version) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false
	}
	c.mu.Lock()
	delete(c.orphans, path)
	c.mu.Unlock()
	c.log.Info("deleted an owner node left by an unanswered acquisition", "path", path)
	return true
}

// readLive fills in the reservations of the live holders an exhaustion
// names (the scan did not read them): -1 for one it cannot read. A
// reservation not in the canonical encoding is refused, naming its node
// (parsePath), as the take would refuse it.
func (c *Coordinator) readLive(ctx context.Context, p paths, e *coordinator.ExhaustedError) error {
	for i := range e.Live {
		path := p.reservations() + "/" + e.Live[i].Slot.Key()
		e.Live[i].Reserved = -1
		d, _, err := c.get(ctx, path)
		if err != nil {
			continue
		}
		v, err := parsePath(path, d)
		if err != nil {
			return err
		}
		e.Live[i].Reserved = v
	}
	return nil
}

// markerAbsentOps are the ops of an acquiring multi that fail it while the
// generator's restore marker exists: create the marker node, then delete
// it again (at version 0, the version it was just created with). With no
// marker they leave nothing behind; with one the create fails
// (ErrNodeExists) and so does the whole multi.
func (c *Coordinator) markerAbsentOps(p paths) []any {
	return []any{
		&zk.CreateRequest{Path: p.restored(), Data: nil, Acl: c.acl, Flags: zk.FlagPersistent},
		&zk.DeleteRequest{Path: p.restored(), Version: 0},
	}
}

// readMarker reads the generator's restore marker: nil when there is none.
func (c *Coordinator) readMarker(ctx context.Context, p paths) (*coordinator.RestoreEvidence, error) {
	ev, _, err := c.readMarkerStat(ctx, p)
	return ev, err
}

func (c *Coordinator) readMarkerStat(ctx context.Context, p paths) (*coordinator.RestoreEvidence, *zk.Stat, error) {
	return c.own().readMarkerStat(ctx, p)
}

// readMarkerGen is what a write of the restore marker relies on: the
// version of the marker's generation node (markerGen; -1 while it does
// not exist), read first, then the marker as readMarkerStat reads it (an
// error with a stat: a marker that does not decode). A write that
// creates, replaces or deletes the marker carries markerGenOp at that
// version in its multi: the marker's version alone does not tell it from
// a marker created anew after it was deleted (a new node starts again at
// version 0), while every write of a marker moves the generation past the
// one read.
func (v via) readMarkerGen(ctx context.Context, p paths) (*coordinator.RestoreEvidence, *zk.Stat, int32, error) {
	gen := int32(-1)
	st, err := v.exists(ctx, p.markerGen())
	if err != nil {
		return nil, nil, 0, unavailable("read restore marker generation", err)
	}
	if st != nil {
		gen = st.Version
	}
	ev, mst, err := v.readMarkerStat(ctx, p)
	return ev, mst, gen, err
}

// markerGenOp is the op of every multi that creates, replaces or deletes
// the restore marker: it sets the marker's generation node at the version
// read before the marker (readMarkerGen), or creates it when it was read
// absent (gen -1), so that the multi fails if any other write of the
// marker came between, and moves the generation for every later one. The
// node is persistent and never deleted.
func (c *Coordinator) markerGenOp(p paths, gen int32) any {
	if gen < 0 {
		return &zk.CreateRequest{Path: p.markerGen(), Data: nil, Acl: c.acl, Flags: zk.FlagPersistent}
	}
	return &zk.SetDataRequest{Path: p.markerGen(), Data: nil, Version: gen}
}

// readMarkerStat is Coordinator.readMarkerStat through v.
func (v via) readMarkerStat(ctx context.Context, p paths) (*coordinator.RestoreEvidence, *zk.Stat, error) {
	data, st, err := v.get(ctx, p.restored())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, unavailable("read restore marker", err)
	}
	ev, err := coordinator.DecodeRestore(p.restored(), data)
	if err != nil {
		return nil, st, err
	}
	return &ev, st, nil
}

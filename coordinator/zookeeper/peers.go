package zookeeper

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
)

// peerWatch follows every live owner node of the cluster with watches: the
// cluster's generators, each generator's owner nodes, and each owner
// node's data. A heartbeat counts as received when the write that carried
// it has been seen through a watch (at that moment, on the coordinator's
// clock). Records that were already there when watching began are not
// reported until they are next written, since their age is unknown; the
// first Peers call sets every watch before it returns, so every write
// after it is seen.
type peerWatch struct {
	c *Coordinator

	mu     sync.Mutex
	beats  map[string]coordinator.PeerBeat // key: generator/slot
	gens   map[string]bool
	owners map[string]bool
}

// retryPause is the wait before a watch is set again after an error.
const retryPause = 250 * time.Millisecond

// Peers implements coordinator.Coordinator. The first call sets the
// watches (bounded by ctx) and returns what they have seen so far, which
// is nothing: heartbeats are reported from their next write on.
func (c *Coordinator) Peers(ctx context.Context) ([]coordinator.PeerBeat, error) {
	if c.isClosed() {
		return nil, unavailable("peers", errors.New("coordinator closed"))
	}
	c.peersOnce.Do(func() {
		c.peers = &peerWatch{c: c, beats: map[string]coordinator.PeerBeat{}, gens: map[string]bool{}, owners: map[string]bool{}}
		c.peers.start(ctx)
	})
	w := c.peers
	w.mu.Lock()
	out := make([]coordinator.PeerBeat, 0, len(w.beats))
	for _, b := range w.beats {
		out = append(out, b)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Generator != out[j].Generator {
			return out[i].Generator < out[j].Generator
		}
		a, b := out[i].Slot, out[j].Slot
		return a.Datacenter < b.Datacenter || (a.Datacenter == b.Datacenter && a.Worker < b.Worker)
	})
	return out, nil
}

// goBG runs f as background work that Close waits for.
func (c *Coordinator) goBG(f func()) {
	if !c.track() {
		return
	}
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// pause waits d or until the coordinator stops; false when it stopped.
func (c *Coordinator) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.bg.Done():
		return false
	case <-t.C:
		return true
	}
}

// wait blocks on a watch channel or until the coordinator stops.
func (c *Coordinator) wait(ch <-chan zk.Event) (zk.Event, bool) {
	select {
	case <-c.bg.Done():
		return zk.Event{}, false
	case ev := <-ch:
		return ev, true
	}
}

// armed is a read whose watch is set.
type armed struct {
	names  []string // children, for a children watch
	data   []byte   // data, for a data watch
	exists bool     // whether the node is there, for an existence watch
	ch     <-chan zk.Event
}

func (w *peerWatch) childrenW(ctx context.Context, path string) (*armed, error) {
	c := w.c
	return callOn(c, ctx, false, func() (*armed, error) { // a read: see read
		n, _, ch, err := c.client().ChildrenW(path)
		if err != nil {
			return nil, err
		}
		return &armed{names: n, ch: ch}, nil
	})
}

func (w *peerWatch) getW(ctx context.Context, path string) (*armed, error) {
	c := w.c
	return callOn(c, ctx, false, func() (*armed, error) { // a read: see read
		d, _, ch, err := c.client().GetW(path)
		if err != nil {
			return nil, err
		}
		return &armed{data: d, ch: ch}, nil
	})
}

// claim marks a generator or owner path as watched; false if it already
// was.
func (w *peerWatch) claim(set map[string]bool, key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if set[key] {
		return false
	}
	set[key] = true
	return true
}

// start sets every watch synchronously (as far as ctx allows), then hands
// each armed watch to its goroutine. Whatever could not be armed here is
// armed by the goroutines themselves.
func (w *peerWatch) start(ctx context.Context) {
	c := w.c
	top, err := w.childrenW(ctx, c.root)
	if err != nil {
		top = nil
	}
	if top != nil {
		for _, g := range top.names {
			if !w.claim(w.gens, g) {
				continue
			}
			p := c.paths(g)
			ga, err := w.childrenW(ctx, p.owners())
			if err != nil {
				ga = nil
			}
			if ga != nil {
				for _, name := range ga.names {
					path := p.owners() + "/" + name
					if !w.claim(w.owners, path) {
						continue
					}
					oa, err := w.getW(ctx, path)
					if errors.Is(err, zk.ErrNoNode) {
						w.mu.Lock()
						delete(w.owners, path)
						w.mu.Unlock()
						continue
					}
					gen, n := g, name
					c.goBG(func() { w.watchOwner(gen, n, path, false, oa) })
				}
			}
			gen := g
			c.goBG(func() { w.watchGenerator(gen, ga) })
		}
	}
	c.goBG(func() { w.watchCluster(top) })
}

// watchChildren calls found with path's children each time they change,
// until the coordinator stops; first is true for a listing not preceded
// by a seen change (the initial one, and after a lost watch). init, when
// not nil, is a listing whose watch is already set (found was already
// called for it).
func (w *peerWatch) watchChildren(path string, init *armed, found func(names []string, first bool)) {
	c := w.c
	cur := init
	for {
		first := cur == nil
		if cur == nil {
			r, err := w.childrenW(c.bg, path)
			if errors.Is(err, zk.ErrNoNode) {
				if c.afterNoNode != nil {
					c.afterNoNode(path)
				}
				// Not there yet: wait for it to appear — unless it
				// appeared since the listing (a generator's node is
				// created before its owner directory), when the watch
				// set is on its data, which never changes.
				e, err := callOn(c, c.bg, false, func() (*armed, error) { // a read: see read
					there, _, ch, err := c.client().ExistsW(path)
					return &armed{ch: ch, exists: there}, err
				})
				if err != nil {
					if !c.pause(retryPause) {
						return
					}
					continue
				}
				if !e.exists {
					if _, ok := c.wait(e.ch); !ok {
						return
					}
				}
				r, err = w.childrenW(c.bg, path)
				first = false
			}
			if err != nil {
				if !c.pause(retryPause) {
					return
				}
				continue
			}
			cur = r
			found(r.names, first)
		}
		ev, ok := c.wait(cur.ch)
		if !ok {
			return
		}
		cur = nil
		if ev.Type == zk.EventNodeChildrenChanged {
			r, err := w.childrenW(c.bg, path)
			if err == nil {
				cur = r
				found(r.names, false)
			}
		}
	}
}

func (w *peerWatch) watchCluster(init *armed) {
	w.watchChildren(w.c.root, init, func(names []string, _ bool) {
		for _, g := range names {
			if w.claim(w.gens, g) {
				gen := g
				w.c.goBG(func() { w.watchGenerator(gen, nil) })
			}
		}
	})
}

func (w *peerWatch) watchGenerator(gen string, init *armed) {
	p := w.c.paths(gen)
	w.watchChildren(p.owners(), init, func(names []string, first bool) {
		for _, name := range names {
			path := p.owners() + "/" + name
			if w.claim(w.owners, path) {
				n, fresh := name, !first
				w.c.goBG(func() { w.watchOwner(gen, n, path, fresh, nil) })
			}
		}
	})
}

// watchOwner follows one owner node until it is deleted. fresh says
// whether its current record was written just now (a node that appeared
// while watching) or at some unknown earlier time. init, when not nil, is
// a read whose watch is already set.
func (w *peerWatch) watchOwner(gen, name, path string, fresh bool, init *armed) {
	c := w.c
	key := gen + "/" + name
	slot, okSlot := coordinator.ParseSlotKey(name)
	defer func() {
		w.mu.Lock()
		delete(w.beats, key)
		delete(w.owners, path)
		w.mu.Unlock()
	}()
	cur := init
	for {
		if cur == nil {
			r, err := w.getW(c.bg, path)
			if errors.Is(err, zk.ErrNoNode) {
				return
			}
			if err != nil {
				if !c.pause(retryPause) {
					return
				}
				fresh = false
				continue
			}
			cur = r
		}
		if fresh && okSlot {
			wall, _ := c.clock.Now()
			w.mu.Lock()
			w.beats[key] = coordinator.PeerBeat{Generator: gen, Slot: slot, Heartbeat: decodeOwner(cur.data).Heartbeat(), Received: wall}
			w.mu.Unlock()
		}
		ev, ok := c.wait(cur.ch)
		if !ok {
			return
		}
		cur = nil
		switch ev.Type {
		case zk.EventNodeDeleted:
			return
		case zk.EventNodeDataChanged:
			fresh = true
		default:
			fresh = false
		}
	}
}

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
// node's data. A heartbeat counts as received when the change that wrote
// it has been seen through a watch (at that moment, on the coordinator's
// clock); records that were already there when watching began are not
// reported until they are next written, since their age is unknown.
type peerWatch struct {
	c *Coordinator

	mu     sync.Mutex
	beats  map[string]coordinator.PeerBeat // key: generator/slot
	gens   map[string]bool
	owners map[string]bool
}

// retryPause is the wait before a watch is set again after an error.
const retryPause = 250 * time.Millisecond

// Peers implements coordinator.Coordinator. The first call starts the
// watches and returns what they have seen so far (possibly nothing).
func (c *Coordinator) Peers(ctx context.Context) ([]coordinator.PeerBeat, error) {
	if c.isClosed() {
		return nil, unavailable("peers", errors.New("coordinator closed"))
	}
	c.peersOnce.Do(func() {
		c.peers = &peerWatch{c: c, beats: map[string]coordinator.PeerBeat{}, gens: map[string]bool{}, owners: map[string]bool{}}
		c.goBG(c.peers.watchCluster)
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
	c.wg.Add(1)
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

type childrenW struct {
	names []string
	ch    <-chan zk.Event
}

// watchChildren calls found with path's children each time they change,
// until the coordinator stops. first is true for the listing made before
// any change was seen (and again after the watch was lost).
func (w *peerWatch) watchChildren(path string, found func(names []string, first bool)) {
	c := w.c
	first := true
	for {
		r, err := call(c, c.bg, func() (childrenW, error) {
			n, _, ch, err := c.conn.ChildrenW(path)
			return childrenW{n, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			// Not there yet: wait for it to appear.
			r2, err := call(c, c.bg, func() (childrenW, error) {
				_, _, ch, err := c.conn.ExistsW(path)
				return childrenW{nil, ch}, err
			})
			if err != nil {
				if !c.pause(retryPause) {
					return
				}
				continue
			}
			if _, ok := c.wait(r2.ch); !ok {
				return
			}
			first = false
			continue
		}
		if err != nil {
			if !c.pause(retryPause) {
				return
			}
			continue
		}
		found(r.names, first)
		ev, ok := c.wait(r.ch)
		if !ok {
			return
		}
		first = ev.Type == zk.EventNotWatching
	}
}

func (w *peerWatch) watchCluster() {
	w.watchChildren(w.c.root, func(names []string, _ bool) {
		for _, g := range names {
			w.mu.Lock()
			seen := w.gens[g]
			w.gens[g] = true
			w.mu.Unlock()
			if !seen {
				gen := g
				w.c.goBG(func() { w.watchGenerator(gen) })
			}
		}
	})
}

func (w *peerWatch) watchGenerator(gen string) {
	p := w.c.paths(gen)
	w.watchChildren(p.owners(), func(names []string, first bool) {
		for _, name := range names {
			path := p.owners() + "/" + name
			w.mu.Lock()
			seen := w.owners[path]
			w.owners[path] = true
			w.mu.Unlock()
			if !seen {
				n, fresh := name, !first
				w.c.goBG(func() { w.watchOwner(gen, n, path, fresh) })
			}
		}
	})
}

type getW struct {
	data []byte
	ch   <-chan zk.Event
}

// watchOwner follows one owner node until it is deleted. fresh says
// whether its current record was written just now (a node that appeared
// while watching) or at some unknown earlier time.
func (w *peerWatch) watchOwner(gen, name, path string, fresh bool) {
	c := w.c
	key := gen + "/" + name
	slot, okSlot := parseSlot(name)
	defer func() {
		w.mu.Lock()
		delete(w.beats, key)
		delete(w.owners, path)
		w.mu.Unlock()
	}()
	for {
		r, err := call(c, c.bg, func() (getW, error) {
			d, _, ch, err := c.conn.GetW(path)
			return getW{d, ch}, err
		})
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
		if fresh && okSlot {
			wall, _ := c.clock.Now()
			w.mu.Lock()
			w.beats[key] = coordinator.PeerBeat{Generator: gen, Slot: slot, Heartbeat: decodeOwner(r.data).heartbeat(), Received: wall}
			w.mu.Unlock()
		}
		ev, ok := c.wait(r.ch)
		if !ok {
			return
		}
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

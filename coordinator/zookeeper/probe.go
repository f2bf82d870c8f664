package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"
)

// via is the client a group of calls goes through: the coordinator's own
// (conn nil), or a probe — a short-lived client with a fresh state, opened
// while the coordinator's own has no session.
//
// Why a probe: a server restored from an older copy of its data refuses
// every reconnect of a client that has seen a later zxid, and such a
// client is exactly a node that saw the writes the restore lost. Its own
// client gets no session again until the old one has expired and the
// coordinator has given it up (redial: the session timeout and more), so
// its reads of a segment counter would show nothing of the restore for
// that long, while a fresh node's claims settle in two read periods. A
// probe has seen nothing, so the restored server takes it; it syncs
// before it reads, so that a follower behind the leader cannot show it
// an older counter (which the node would take for a restore).
type via struct {
	c    *Coordinator
	conn *zk.Conn
}

// own is the coordinator's own client.
func (c *Coordinator) own() via { return via{c: c} }

// answering returns the client a read that must be answered now goes
// through: the coordinator's own while it has a session, else a probe
// (connected, authenticated and synced, or an error matching
// coordinator.ErrUnavailable). done closes a probe; call it when the
// group of calls is over.
func (c *Coordinator) answering(ctx context.Context) (v via, done func(), err error) {
	if c.client().State() == zk.StateHasSession {
		return c.own(), func() {}, nil
	}
	conn, err := c.openProbe(ctx)
	if err != nil {
		return via{}, nil, unavailable("read through a fresh client (this node's own has no session)", err)
	}
	return via{c: c, conn: conn}, func() { c.closeProbe(conn) }, nil
}

// closeProbe closes a probe's client in the background: Close waits for
// the server's answer (up to a second), which is not the caller's
// business. Coordinator.Close waits for it.
func (c *Coordinator) closeProbe(conn *zk.Conn) {
	if !c.track() {
		conn.Close()
		return
	}
	go func() {
		defer c.wg.Done()
		conn.Close()
	}()
}

// openProbe connects a client with a fresh state, waits for its session
// (within the coordinator timeout and ctx), authenticates and syncs the
// cluster's node.
func (c *Coordinator) openProbe(ctx context.Context) (*zk.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timing.Timeout)
	defer cancel()
	conn, events, err := zk.Connect(c.cfg.Servers, c.cfg.Timing.LeaseTTL,
		zk.WithDialer(zk.Dialer(c.dialer)),
		zk.WithLogger(zkLogger{c.log}),
		zk.WithLogInfo(false),
	)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*zk.Conn, error) {
		c.closeProbe(conn)
		return nil, err
	}
	for session := false; !session; {
		select {
		case ev := <-events:
			switch ev.State {
			case zk.StateHasSession:
				session = true
			case zk.StateAuthFailed:
				return fail(zk.ErrAuthFailed)
			}
		case <-ctx.Done():
			return fail(fmt.Errorf("no session within %v: %w", c.cfg.Timing.Timeout, ctx.Err()))
		}
	}
	if c.cfg.Auth != "" {
		if _, err := callOn(c, ctx, false, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(c.cfg.Auth))
		}); err != nil {
			return fail(fmt.Errorf("digest auth: %w", err))
		}
	}
	if _, err := callOn(c, ctx, false, func() (string, error) { return conn.Sync(c.root) }); err != nil {
		return fail(fmt.Errorf("sync %s: %w", c.root, err))
	}
	c.log.Debug("zookeeper probe session: this client has no session, reading through a fresh one",
		"session", fmt.Sprintf("%#x", conn.SessionID()), "server", conn.Server())
	return conn, nil
}

// client is the client of v.
func (v via) client() *zk.Conn {
	if v.conn != nil {
		return v.conn
	}
	return v.c.client()
}

// run is call for v: a probe's answers say nothing of the coordinator's
// own session (Lease.Assured).
func run[T any](v via, ctx context.Context, f func(*zk.Conn) (T, error)) (T, error) {
	conn := v.client()
	return callOn(v.c, ctx, v.conn == nil, func() (T, error) { return f(conn) })
}

// read is run for a read: a follower answers it from its own copy, also
// while a partition has cut it off from the leader (for up to syncLimit
// ticks), which meanwhile hears nothing of the session and expires it on
// time. Its answer says nothing of the session's life at the leader, so
// it never counts for Lease.Assured; writes and syncs, which the leader
// answers, do.
func read[T any](v via, ctx context.Context, f func(*zk.Conn) (T, error)) (T, error) {
	conn := v.client()
	return callOn(v.c, ctx, false, func() (T, error) { return f(conn) })
}

func (v via) get(ctx context.Context, path string) ([]byte, *zk.Stat, error) {
	r, err := read(v, ctx, func(conn *zk.Conn) (getResult, error) {
		d, st, err := conn.Get(path)
		return getResult{d, st}, err
	})
	return r.data, r.stat, err
}

func (v via) exists(ctx context.Context, path string) (*zk.Stat, error) {
	return read(v, ctx, func(conn *zk.Conn) (*zk.Stat, error) {
		ok, st, err := conn.Exists(path)
		if err != nil || !ok {
			return nil, err
		}
		return st, nil
	})
}

func (v via) create(ctx context.Context, path string, data []byte, flags int32) error {
	_, err := run(v, ctx, func(conn *zk.Conn) (string, error) { return conn.Create(path, data, flags, v.c.acl) })
	return err
}

func (v via) multi(ctx context.Context, ops []any) ([]zk.MultiResponse, error) {
	return run(v, ctx, func(conn *zk.Conn) ([]zk.MultiResponse, error) { return conn.Multi(ops...) })
}

// ensurePath creates every missing element of path (persistent, firn's
// ACL).
func (v via) ensurePath(ctx context.Context, path string) error {
	st, err := v.exists(ctx, path)
	if err != nil {
		return unavailable("exists "+path, err)
	}
	if st != nil {
		return nil
	}
	p := ""
	for _, el := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		p += "/" + el
		err := v.create(ctx, p, nil, zk.FlagPersistent)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return unavailable("create "+p, err)
		}
	}
	return nil
}

package zktest_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/internal/testing/zktest"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func connect(t *testing.T, addrs []string, timeout time.Duration, dial zk.Dialer, cb zk.EventCallback) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	if dial == nil {
		dial = net.DialTimeout
	}
	if cb == nil {
		cb = func(zk.Event) {}
	}
	c, ev, err := zk.Connect(addrs, timeout, zk.WithLogger(quiet{}), zk.WithDialer(dial), zk.WithEventCallback(cb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("no session with %v (state %v)", addrs, c.State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, ev
}

// TestStandaloneExpireSession: the Recorder learns the session from the
// handshake and ExpireSession ends it: the ephemeral node is gone at once
// and the client is told its session expired.
func TestStandaloneExpireSession(t *testing.T) {
	s := zktest.StartStandalone(t)
	if m, err := s.Mode(); err != nil || m != "standalone" {
		t.Fatalf("mode %q, %v", m, err)
	}
	rec := &zktest.Recorder{}
	expired := make(chan struct{}, 1)
	c, _ := connect(t, []string{s.Addr}, 4*time.Second, rec.Dial, func(ev zk.Event) {
		if ev.State == zk.StateExpired {
			select {
			case expired <- struct{}{}:
			default:
			}
		}
	})
	sess, ok := rec.Session()
	if !ok || sess.ID != c.SessionID() || sess.Timeout != 4*time.Second {
		t.Fatalf("recorded %+v ok=%v, client session %#x", sess, ok, c.SessionID())
	}
	if _, err := c.Create("/e", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	z0, err := s.Zxid()
	if err != nil || z0 <= 0 {
		t.Fatalf("zxid %d, %v", z0, err)
	}
	if err := zktest.ExpireSession(s.Addr, sess, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	other, _ := connect(t, []string{s.Addr}, 4*time.Second, nil, nil)
	if ok, _, err := other.Exists("/e"); err != nil || ok {
		t.Fatalf("ephemeral still there after ExpireSession: %v %v", ok, err)
	}
	select {
	case <-expired:
	case <-time.After(10 * time.Second):
		t.Fatal("client never saw StateExpired")
	}
}

// TestProxyDropReply: the request reaches the server, its reply does not;
// the client sees a connection error although the write was applied.
func TestProxyDropReply(t *testing.T) {
	s := zktest.StartStandalone(t)
	p := zktest.NewProxy(t, s.Addr)
	c, _ := connect(t, []string{p.Addr()}, 4*time.Second, nil, nil)
	if _, err := c.Create("/n", []byte("0"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	p.DropNextReply(zktest.OpSetData)
	_, err := c.Set("/n", []byte("1"), 0)
	if err == nil || errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("set through a dropped reply returned %v", err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("dropped %d", p.Dropped())
	}
	d, st, err := getAfterSever(t, c, "/n")
	if err != nil {
		t.Fatalf("after lost reply: %v", err)
	}
	if string(d) != "1" || st.Version != 1 {
		t.Fatalf("after lost reply: %q v%d", d, st.Version)
	}

	p.DropNextRequest(zktest.OpSetData)
	if _, err := c.Set("/n", []byte("2"), 1); err == nil {
		t.Fatal("set through a dropped request succeeded")
	}
	d, st, err = getAfterSever(t, c, "/n")
	if err != nil {
		t.Fatalf("after dropped request: %v", err)
	}
	if string(d) != "1" || st.Version != 1 {
		t.Fatalf("after dropped request: %q v%d", d, st.Version)
	}
}

// getAfterSever reads path once the client is back after the proxy closed
// its connection. With a one-server list, go-zookeeper fails the requests
// queued while it reconnects with ErrNoServer (or ErrConnectionClosed) and
// waits a second before dialling again: those are retried, any other
// error is returned.
func getAfterSever(t *testing.T, c *zk.Conn, path string) ([]byte, *zk.Stat, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, st, err := c.Get(path)
		if (errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrConnectionClosed)) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return d, st, err
	}
}

// TestEnsembleFreezeFailover: a client that knows every server keeps its
// session when its server is frozen, and the ensemble keeps its leader.
func TestEnsembleFreezeFailover(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	if _, err := e.Leader(); err != nil {
		t.Fatal(err)
	}
	// Freeze a follower the client is connected to (a frozen leader is a
	// different story: the followers notice it only after syncLimit).
	var c *zk.Conn
	var srv *zktest.Server
	for i := 0; i < 20 && srv == nil; i++ {
		cc, _ := connect(t, e.Addrs(), 4*time.Second, nil, nil)
		s := e.ByAddr(cc.Server())
		if s == nil {
			t.Fatalf("client server %q not in %v", cc.Server(), e.Addrs())
		}
		if m, err := s.Mode(); err == nil && m == "follower" {
			c, srv = cc, s
			break
		}
		cc.Close()
	}
	if srv == nil {
		t.Fatal("never connected to a follower")
	}
	id := c.SessionID()
	if _, err := c.Create("/e", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, _, err := c.Exists("/e")
		if err == nil && ok && c.Server() != srv.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover from frozen %s: exists=%v err=%v server=%s", srv.Addr, ok, err, c.Server())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.SessionID() != id {
		t.Fatalf("session changed %#x -> %#x", id, c.SessionID())
	}
	srv.Thaw()
	if err := srv.WaitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	z, err := e.Zxid()
	if err != nil || z <= 0 {
		t.Fatalf("zxid %d %v", z, err)
	}
	out, err := zktest.FourLetter(e.Servers[0].Addr, "ruok", time.Second)
	if err != nil || !strings.Contains(out, "imok") {
		t.Fatalf("ruok: %q %v", out, err)
	}
}

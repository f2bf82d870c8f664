package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/client/clienttest"
)

// sharedPort listens on one port of 127.0.0.1 … 127.0.0.n (the addresses
// of one name), retrying with another port when one is taken.
func sharedPort(t *testing.T, n int) (string, []net.Listener) {
	t.Helper()
	for try := 0; try < 20; try++ {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(first.Addr().(*net.TCPAddr).Port)
		lis := []net.Listener{first}
		for i := 2; i <= n; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0."+strconv.Itoa(i), port))
			if err != nil {
				break
			}
			lis = append(lis, l)
		}
		if len(lis) == n {
			return port, lis
		}
		for _, l := range lis {
			l.Close()
		}
	}
	t.Fatal("no port free on every loopback address")
	return "", nil
}

// names is a DNS the test controls.
type names struct {
	mu    sync.Mutex
	addrs []string
	asked int
}

func (d *names) set(addrs ...string) {
	d.mu.Lock()
	d.addrs = addrs
	d.mu.Unlock()
}

func (d *names) lookup(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked++
	if host != "firn.test" {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if d.addrs == nil {
		return nil, errors.New("server misbehaving")
	}
	return slices.Clone(d.addrs), nil
}

// One DNS name, three nodes: every address is an endpoint; a node that
// refuses and a node that dies are left without a failed call; a name
// that stops resolving keeps its endpoints, and an address the name no
// longer has leaves the list.
func TestDNSNameEndpoints(t *testing.T) {
	port, lis := sharedPort(t, 3)
	var srvs []*clienttest.Server
	for i, l := range lis {
		s := clienttest.NewServerOn(l, uint64(i+1)<<40, nil)
		t.Cleanup(s.Close)
		srvs = append(srvs, s)
	}
	dns := &names{}
	dns.set("127.0.0.1", "127.0.0.2", "127.0.0.3")
	c := newClient(t, []string{"dns:///firn.test:" + port}, WithLookup(dns.lookup),
		WithResolveInterval(100*time.Millisecond), WithCallTimeout(500*time.Millisecond))
	// New does not wait for DNS: the resolver resolves the name at once.
	waitFor(t, 5*time.Second, "3 endpoints from a name with 3 addresses", func() bool { return len(c.endpointList()) == 3 })
	ctx := ctxFor(t, 30*time.Second)
	var all []uint64
	take := func(n int) {
		t.Helper()
		for range n {
			id, err := c.Next(ctx)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			all = append(all, id)
		}
	}
	take(1000)
	owner := func(addr string) *clienttest.Server {
		for _, s := range srvs {
			if s.Addr == addr {
				return s
			}
		}
		t.Fatalf("serving from %q, which is none of the name's addresses", addr)
		return nil
	}
	// moveOn takes IDs until the client serves from another node (the
	// buffer holds IDs fetched before) and returns that node.
	moveOn := func(from ...*clienttest.Server) *clienttest.Server {
		t.Helper()
		for start := time.Now(); time.Since(start) < 10*time.Second; {
			take(100)
			if s := owner(c.Stats().Endpoint); !slices.Contains(from, s) {
				return s
			}
		}
		t.Fatalf("still serving from %s", c.Stats().Endpoint)
		return nil
	}
	// The node in use fails closed, then the next one dies.
	first := owner(c.Stats().Endpoint)
	down(first.Service)
	second := moveOn(first)
	second.Close()
	moveOn(first, second)
	checkDistinct(t, all)

	// The name stops resolving: the endpoints stay.
	dns.mu.Lock()
	dns.addrs = nil
	asked := dns.asked
	dns.mu.Unlock()
	waitFor(t, 5*time.Second, "a re-resolution", func() bool {
		dns.mu.Lock()
		defer dns.mu.Unlock()
		return dns.asked > asked+1
	})
	if got := len(c.endpointList()); got != 3 {
		t.Fatalf("%d endpoints after the name failed to resolve, want the 3 it had", got)
	}
	// The name loses an address: its endpoint leaves the list.
	dns.set("127.0.0.1", "127.0.0.3")
	waitFor(t, 5*time.Second, "the dropped address to leave", func() bool { return len(c.endpointList()) == 2 })
	for _, ep := range c.endpointList() {
		if ep.addr == net.JoinHostPort("127.0.0.2", port) {
			t.Fatalf("endpoints %v still hold the dropped address", c.endpointList())
		}
	}
	take(100)
	checkDistinct(t, all)
}

// A name that resolves to nothing yet: calls are refused with
// ErrUnavailable naming it, and serve once the name resolves.
func TestDNSNameResolvesLater(t *testing.T) {
	port, lis := sharedPort(t, 1)
	s := clienttest.NewServerOn(lis[0], 1, nil)
	t.Cleanup(s.Close)
	dns := &names{}
	c := newClient(t, []string{"dns:///firn.test:" + port}, WithLookup(dns.lookup), WithResolveInterval(100*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	if _, err := c.Next(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Next before the name resolves: %v, want ErrUnavailable", err)
	}
	dns.set("127.0.0.1")
	waitFor(t, 5*time.Second, "Next to serve once the name resolves", func() bool {
		_, err := c.Next(ctx)
		return err == nil
	})
}

func TestDNSTargetErrors(t *testing.T) {
	for _, e := range []string{"dns://8.8.8.8/firn.test:7300", "dns:///firn.test", "dns:///:7300"} {
		if _, err := New([]string{e}, WithLogger(quiet)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New(%q): %v, want ErrInvalidOption", e, err)
		}
	}
	if _, err := New([]string{"dns:///localhost:7300"}, WithLogger(quiet), WithResolveInterval(time.Millisecond)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("ResolveInterval 1ms: %v, want ErrInvalidOption", err)
	}
}

// New does not wait for DNS (a slow resolver costs it nothing); the first
// call waits for the first resolution, within its deadline. The resolver
// answers only when the test lets it: a New that waited for it would
// never return.
func TestNewDoesNotWaitForDNS(t *testing.T) {
	port, lis := sharedPort(t, 1)
	s := clienttest.NewServerOn(lis[0], 1, nil)
	t.Cleanup(s.Close)
	dns := &names{}
	dns.set("127.0.0.1")
	answer := make(chan struct{})
	slow := func(ctx context.Context, host string) ([]string, error) {
		select {
		case <-answer:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return dns.lookup(ctx, host)
	}
	made := make(chan *Client, 1)
	go func() { made <- newClient(t, []string{"dns:///firn.test:" + port}, WithLookup(slow)) }()
	var c *Client
	select {
	case c = <-made:
	case <-time.After(10 * time.Second):
		close(answer)
		t.Fatal("New waits for the resolver")
	}
	// Unresolved, there is no node to ask.
	if id, err := c.Next(ctxFor(t, 300*time.Millisecond)); err == nil {
		t.Fatalf("Next served %d before the name resolved", id)
	}
	close(answer)
	if _, err := c.Next(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("the first Next after the name resolved: %v", err)
	}
}

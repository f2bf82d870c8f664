package clientnode

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/client"
)

// sharedPort finds a port free on 127.0.0.1, 127.0.0.2 and 127.0.0.3.
func sharedPort(t *testing.T) string {
	t.Helper()
	for try := 0; try < 20; try++ {
		port := freePort(t)
		ok := true
		for i := 2; i <= 3 && ok; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0."+strconv.Itoa(i), port))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on 127.0.0.1-3")
	return ""
}

// The Kubernetes connectivity scenario, on loopback: the client is given
// one name (as it would be a headless Service's) that resolves to three
// real nodes on one coordinator. Under load, one node fails closed (its
// clock stepped back 5 s, beyond max-lead), then another is killed: no
// Next call fails, every ID is distinct, and the client ends on the node
// left.
func TestOneNameThreeNodes(t *testing.T) {
	bin := buildFirn(t)
	port := sharedPort(t)
	faultAddr := "127.0.0.1:" + freePort(t)
	addrs := []string{"127.0.0.1:" + port, "127.0.0.2:" + port, "127.0.0.3:" + port}
	first := startNodeAt(t, bin, addrs[0], "--embedded-client-addr", "127.0.0.1:"+freePort(t),
		"--embedded-peer-addr", "127.0.0.1:"+freePort(t))
	_, _, etcdURL := first.slot(t)
	nodes := map[string]*node{addrs[0]: first}
	for _, a := range addrs[1:] {
		args := []string{"--etcd", etcdURL}
		if a == addrs[1] {
			args = append(args, "--enable-fault-injection", "--fault-addr", faultAddr)
		}
		nodes[a] = startNodeAt(t, bin, a, args...)
	}
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host != "firn-headless.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, nil
	}
	c := newClient(t, []string{"dns:///firn-headless.test:" + port}, client.WithLookup(lookup),
		client.WithMaxAge(time.Second), client.WithCallTimeout(2*time.Second))
	ctx := ctxFor(t, 90*time.Second)

	var mu sync.Mutex
	var all []uint64
	take := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := make([]uint64, 0, n/4)
				for range n / 4 {
					id, err := c.Next(ctx)
					if err != nil {
						errs <- err
						return
					}
					ids = append(ids, id)
				}
				mu.Lock()
				all = append(all, ids...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("a Next call failed: %v (reason %v)", err, client.Reason(err))
		}
	}
	take(40_000)

	// The node with fault injection fails closed: a backward step of 5 s.
	resp, err := http.PostForm("http://"+faultAddr+"/debug/fault/clock-offset", url.Values{"offset": {"-5s"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("fault injection: %s", resp.Status)
	}
	// A node that issued IDs fails closed on the step itself; one that sat
	// idle is caught by its peers' median a few seconds later.
	waitFor(t, 15*time.Second, "the stepped-back node to fail closed", func() bool {
		c := nodes[addrs[1]].cause(t)
		return c == "CLOCK_ROLLBACK" || c == "PEER_SKEW"
	})
	take(40_000)
	// Another node dies: the one the client serves from, unless that is
	// the first (then the third).
	victim := c.Stats().Endpoint
	if victim == addrs[0] || victim == addrs[1] {
		victim = addrs[2]
	}
	if err := nodes[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	take(40_000)
	for start := time.Now(); c.Stats().Endpoint != addrs[0]; take(4000) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("serving from %s with only %s left serving", c.Stats().Endpoint, addrs[0])
		}
	}
	checkDistinct(t, all)
	t.Logf("%d IDs, all distinct; serving from %s at the end", len(all), c.Stats().Endpoint)
}

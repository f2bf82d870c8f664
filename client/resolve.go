package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// A target is one string given to New: a fixed gRPC target, one endpoint;
// or a DNS name ("dns:///firn-headless.ns.svc:7300"), every address of
// which is an endpoint of its own.
type target struct {
	raw        string
	host, port string // set for a DNS name
}

func (t target) isName() bool { return t.host != "" }

// parseTarget reads a "dns:///host:port" target; any other string is a
// fixed target passed to gRPC as it is.
func parseTarget(s string) (target, error) {
	rest, ok := strings.CutPrefix(s, "dns:")
	if !ok {
		return target{raw: s}, nil
	}
	hostport, ok := strings.CutPrefix(rest, "///")
	if !ok {
		return target{}, optionErr("endpoint %q: a DNS name is dns:///host:port (a DNS server authority is not supported)", s)
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return target{}, optionErr("endpoint %q: a DNS name is dns:///host:port with both parts", s)
	}
	return target{raw: s, host: host, port: port}, nil
}

// resolveEvery is the default period of re-resolution (WithResolveInterval).
const resolveEvery = 30 * time.Second

// minResolveGap spaces re-resolutions asked for by failed rounds.
const minResolveGap = time.Second

// endpointList returns the current endpoints.
func (c *Client) endpointList() []*endpoint { return *c.eps.Load() }

// resolve brings the endpoint list in line with the targets: fixed
// targets stay; a DNS name's endpoints become the addresses it resolves
// to now. A name that fails to resolve, or resolves to nothing, keeps the
// endpoints it had (a DNS outage does not empty the client). Endpoints
// that left are closed after the list no longer holds them.
//
// lookups false resolves no name (New: the fixed targets only).
func (c *Client) resolve(ctx context.Context, lookups bool) {
	c.epMu.Lock()
	defer c.epMu.Unlock()
	old := c.endpointList()
	var want []string
	owner := map[string]target{}
	for _, t := range c.targets {
		if !t.isName() {
			want = append(want, t.raw)
			owner[t.raw] = t
			continue
		}
		if !lookups {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := c.opts.lookup(lctx, t.host)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("cannot resolve endpoint name; keeping its endpoints", "name", t.raw, "err", err)
			}
			for _, ep := range old {
				if ep.from == t.raw {
					want = append(want, ep.addr)
					owner[ep.addr] = t
				}
			}
			continue
		}
		slices.Sort(addrs)
		for _, a := range addrs {
			addr := net.JoinHostPort(a, t.port)
			if _, dup := owner[addr]; !dup {
				want = append(want, addr)
				owner[addr] = t
			}
		}
	}
	byAddr := map[string]*endpoint{}
	for _, ep := range old {
		byAddr[ep.addr] = ep
	}
	next := make([]*endpoint, 0, len(want))
	for _, addr := range want {
		if ep, ok := byAddr[addr]; ok {
			next = append(next, ep)
			delete(byAddr, addr)
			continue
		}
		ep, err := c.dialEndpoint(addr, owner[addr])
		if err != nil {
			c.log.Warn("cannot use endpoint", "endpoint", addr, "err", err)
			continue
		}
		if len(old) > 0 {
			c.log.Info("endpoint added", "endpoint", addr, "from", owner[addr].raw)
		}
		next = append(next, ep)
	}
	c.eps.Store(&next)
	for _, ep := range byAddr { // no longer resolved
		c.log.Info("endpoint removed", "endpoint", ep.addr, "from", ep.from)
		ep.stop()
	}
}

// dialEndpoint makes the endpoint for addr and starts its health watch.
// An address resolved from a name is dialled with the name as its
// authority, so TLS verifies the name's certificate.
func (c *Client) dialEndpoint(addr string, t target) (*endpoint, error) {
	dial := c.dial
	if t.isName() {
		dial = append(slices.Clip(dial), grpc.WithAuthority(net.JoinHostPort(t.host, t.port)))
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: endpoint %q: %w", addr, err)
	}
	ep := newEndpoint(addr, conn)
	ep.from = t.raw
	ep.ctx, ep.cancel = context.WithCancel(c.ctx)
	if c.opts.health {
		c.wg.Add(1)
		go c.watchHealth(ep)
	}
	return ep, nil
}

// resolver re-resolves the DNS targets every resolveEvery, and soon after
// a failed round asks for it (askResolve).
func (c *Client) resolver() {
	defer c.wg.Done()
	c.resolve(c.ctx, true)
	close(c.resolved)
	t := time.NewTimer(c.opts.resolveEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.resolveC:
			if wait := minResolveGap - time.Since(last); wait > 0 {
				select {
				case <-c.ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		c.resolve(c.ctx, true)
		last = time.Now()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(c.opts.resolveEvery)
	}
}

// awaitResolved waits, when the client has no endpoint yet, for the
// first resolution of its DNS names (bounded by ctx, and by Close).
func (c *Client) awaitResolved(ctx context.Context) {
	if len(c.endpointList()) > 0 {
		return
	}
	select {
	case <-c.resolved:
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
}

// askResolve asks the resolver for a re-resolution (after a failed round);
// a no-op without DNS targets.
func (c *Client) askResolve() {
	if c.resolveC == nil {
		return
	}
	select {
	case c.resolveC <- struct{}{}:
	default:
	}
}

package zktest

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy between ZooKeeper clients and one server that
// understands the protocol's framing, so a test can cut connections, drop
// one request, or drop the reply to one request (the request is applied by
// the server, the client never learns the outcome) — a lost reply.
type Proxy struct {
	ln     net.Listener
	tb     testing.TB
	target atomic.Value // string

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	refuse bool
	closed bool

	dropReplyOp   atomic.Int32 // 0: off
	dropReplySkip atomic.Int32 // requests with dropReplyOp to forward first
	dropRequestOp atomic.Int32 // 0: off
	dropped       atomic.Int64
	wg            sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	dropXid        atomic.Int64 // -1: none
	once           sync.Once
}

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		pc.client.Close()
		pc.server.Close()
	})
}

// NewProxy listens on a free loopback port and forwards to target. It is
// closed at tb's cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("zktest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, tb: tb, conns: map[*proxyConn]struct{}{}}
	p.target.Store(target)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget points new connections at another server.
func (p *Proxy) SetTarget(addr string) { p.target.Store(addr) }

// Sever closes every open connection (a connection loss; clients
// reconnect through the proxy).
func (p *Proxy) Sever() {
	p.mu.Lock()
	cs := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}

// Refuse makes the proxy close new connections at once (true) or accept
// them again (false): with Sever, a partition between clients and server.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// DropNextReply arms the proxy: the next request with opcode op is
// forwarded, its reply is dropped and the connection is closed.
func (p *Proxy) DropNextReply(op int32) { p.DropReplyAfter(op, 0) }

// DropReplyAfter is DropNextReply for the request with opcode op that
// follows the next skip of them (which are answered).
func (p *Proxy) DropReplyAfter(op int32, skip int) {
	p.dropReplySkip.Store(int32(skip))
	p.dropReplyOp.Store(op)
}

// DropNextRequest arms the proxy: the next request with opcode op is not
// forwarded and the connection is closed.
func (p *Proxy) DropNextRequest(op int32) { p.dropRequestOp.Store(op) }

// Dropped counts the requests and replies dropped so far.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Sever()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target.Load().(string))
		if err != nil {
			c.Close()
			continue
		}
		pc := &proxyConn{client: c, server: s}
		pc.dropXid.Store(-1)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.close()
			continue
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.upstream(pc)
		go p.downstream(pc)
	}
}

func (p *Proxy) forget(pc *proxyConn) {
	pc.close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// upstream carries client frames to the server: the handshake first, then
// requests (xid int32, opcode int32, body).
func (p *Proxy) upstream(pc *proxyConn) {
	defer p.wg.Done()
	defer p.forget(pc)
	first := true
	for {
		f, err := readFrame(pc.client)
		if err != nil {
			return
		}
		if !first && len(f) >= 12 {
			xid := int32(binary.BigEndian.Uint32(f[4:8]))
			op := int32(binary.BigEndian.Uint32(f[8:12]))
			if op != 0 && p.dropRequestOp.CompareAndSwap(op, 0) {
				p.dropped.Add(1)
				return
			}
			if op != 0 && op == p.dropReplyOp.Load() && p.dropReplySkip.Add(-1) < 0 && p.dropReplyOp.CompareAndSwap(op, 0) {
				pc.dropXid.Store(int64(xid))
			}
		}
		first = false
		if _, err := pc.server.Write(f); err != nil {
			return
		}
	}
}

// downstream carries server frames to the client: the handshake answer,
// then replies (xid int32, zxid int64, err int32, body).
func (p *Proxy) downstream(pc *proxyConn) {
	defer p.wg.Done()
	defer p.forget(pc)
	first := true
	for {
		f, err := readFrame(pc.server)
		if err != nil {
			return
		}
		if !first && len(f) >= 8 {
			xid := int64(int32(binary.BigEndian.Uint32(f[4:8])))
			if d := pc.dropXid.Load(); d >= 0 && xid == d {
				p.dropped.Add(1)
				return
			}
		}
		first = false
		if _, err := pc.client.Write(f); err != nil {
			return
		}
	}
}

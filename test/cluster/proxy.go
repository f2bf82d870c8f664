package cluster

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ProxyMode is what a Proxy does with the bytes it carries.
type ProxyMode int32

const (
	// Pass forwards both ways.
	Pass ProxyMode = iota
	// Blackhole keeps connections open and silently drops every byte
	// both ways: a partition in which packets vanish.
	Blackhole
	// DropReplies forwards requests but drops what the server sends back:
	// writes commit, their replies are lost.
	DropReplies
	// Delay forwards both ways after the proxy's delay.
	Delay
)

func (m ProxyMode) String() string {
	return [...]string{"pass", "blackhole", "drop-replies", "delay"}[m]
}

// Proxy is a TCP proxy in front of one coordinator endpoint, for
// partitions between a node and its coordinator without root or a
// firewall.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	delay  atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed atomic.Bool
	wg     sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target. It
// stops at test cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address, to give the node instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the mode for every connection, open and future.
func (p *Proxy) Set(m ProxyMode) { p.mode.Store(int32(m)) }

// Mode returns the mode in force.
func (p *Proxy) Mode() ProxyMode { return ProxyMode(p.mode.Load()) }

// SetDelay sets the delay of the Delay mode.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Sever closes every open connection (clients reconnect through it).
func (p *Proxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.ln.Close()
	p.Sever()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(down)
	}
}

func (p *Proxy) serve(down net.Conn) {
	defer p.wg.Done()
	p.track(down, true)
	defer p.track(down, false)
	defer down.Close()
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, down, false); done <- struct{}{} }()
	go func() { p.pipe(down, up, true); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst chunk by chunk, consulting the mode for each.
func (p *Proxy) pipe(dst io.Writer, src io.Reader, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch ProxyMode(p.mode.Load()) {
			case Blackhole:
				n = 0
			case DropReplies:
				if reply {
					n = 0
				}
			case Delay:
				time.Sleep(time.Duration(p.delay.Load()))
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

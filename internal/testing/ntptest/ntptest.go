// Package ntptest is a real NTP responder over UDP for tests: it listens on
// a loopback port, answers NTPv3/v4 client requests from an injected clock,
// and lets a test change its behaviour while it runs — an offset, a
// stratum, a kiss-of-death, "not in sync", added delay, or silence.
//
// Typical use in a test:
//
//	srv := ntptest.NewServer(t)                  // 127.0.0.1:<free port>, closed at cleanup
//	srv.SetOffset(1500 * time.Millisecond)       // the server's time runs 1.5s ahead
//	cfg := clockguard.DefaultNTPConfig(srv.Addr())
//
// Outside a test (a separate process started by a chaos test), use Start
// and Close.
//
// The server's time is its clock's wall reading plus the offset, read once
// per request (receive and transmit timestamps are equal), so a client on
// the same clock reads back the offset to within the timestamp resolution.
// The answer copies the request's transmit timestamp into its origin field,
// as a client checks. Every setter is safe to call from any goroutine and
// applies to the next request.
package ntptest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
)

const (
	packetSize = 48
	// ntpUnixDelta is the number of seconds from 1900-01-01 (NTP's era 0)
	// to 1970-01-01 (Unix time).
	ntpUnixDelta = 2208988800
	// leapNotInSync is the leap indicator "clock not synchronised".
	leapNotInSync = 3
	modeClient    = 3
	modeServer    = 4
)

// Server is a running NTP responder. Create it with Start or NewServer.
type Server struct {
	conn  net.PacketConn
	clock clockguard.Clock

	mu sync.Mutex
	b  behaviour

	requests atomic.Uint64
	answers  atomic.Uint64

	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// behaviour is what the server does with the next request.
type behaviour struct {
	offset    time.Duration
	stratum   uint8
	kiss      string // non-empty: answer with a kiss-of-death carrying it
	notInSync bool
	silent    bool
	delay     time.Duration
}

func defaultBehaviour() behaviour { return behaviour{stratum: 1} }

// Option configures Start and NewServer.
type Option func(*options)

type options struct {
	addr  string
	clock clockguard.Clock
}

// WithClock sets the clock the server's time is read from (default
// clockguard.NewSystem()). A test that measures an injected clock gives the
// server the unshifted base clock, so the offsets it sets are exact.
func WithClock(c clockguard.Clock) Option { return func(o *options) { o.clock = c } }

// WithAddr sets the UDP address to listen on (default "127.0.0.1:0", a free
// port). Only loopback addresses are accepted.
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// Start listens and serves until Close. It fails for a non-loopback
// address or when the port cannot be bound.
func Start(opts ...Option) (*Server, error) {
	o := options{addr: "127.0.0.1:0"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = clockguard.NewSystem()
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return nil, fmt.Errorf("ntptest: address %q: %w", o.addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("ntptest: address %q: only loopback IP addresses are allowed", o.addr)
	}
	conn, err := net.ListenPacket("udp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("ntptest: listen: %w", err)
	}
	s := &Server{conn: conn, clock: o.clock, b: defaultBehaviour()}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// NewServer starts a server for tb, fails tb if it cannot, and closes it in
// tb's cleanup.
func NewServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := Start(opts...)
	if err != nil {
		tb.Fatalf("ntptest: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Addr returns the "127.0.0.1:port" address to query.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Close stops the server and waits for its goroutines. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.conn.Close()
		s.wg.Wait()
	})
	return s.closeErr
}

// Requests returns the number of well-formed client requests received
// (answered or not); Answers the number of replies sent.
func (s *Server) Requests() uint64 { return s.requests.Load() }

// Answers returns the number of replies sent.
func (s *Server) Answers() uint64 { return s.answers.Load() }

// SetOffset sets how far the server's time runs ahead of its clock
// (negative: behind). A client on the same clock measures its own clock as
// off by −d.
func (s *Server) SetOffset(d time.Duration) { s.update(func(b *behaviour) { b.offset = d }) }

// SetStratum sets the stratum of normal answers (default 1). Values outside
// 1..15 are sent as given, for tests of clients that refuse them.
func (s *Server) SetStratum(n uint8) { s.update(func(b *behaviour) { b.stratum = n }) }

// SetKissOfDeath makes every answer a kiss-of-death: stratum 0, leap
// indicator 3 and the code (up to 4 ASCII characters, e.g. "RATE", "DENY")
// as reference ID. An empty code turns it off.
func (s *Server) SetKissOfDeath(code string) {
	if len(code) > 4 {
		code = code[:4]
	}
	s.update(func(b *behaviour) { b.kiss = code })
}

// SetNotInSync makes answers carry leap indicator 3 ("not synchronised").
func (s *Server) SetNotInSync(on bool) { s.update(func(b *behaviour) { b.notInSync = on }) }

// SetSilent makes the server drop every request without an answer, as an
// unreachable server would.
func (s *Server) SetSilent(on bool) { s.update(func(b *behaviour) { b.silent = on }) }

// SetDelay holds each answer for d before the server reads its clock, so
// the delay adds to the round trip a client measures.
func (s *Server) SetDelay(d time.Duration) { s.update(func(b *behaviour) { b.delay = d }) }

// Reset restores the default behaviour: offset 0, stratum 1, in sync,
// answering at once.
func (s *Server) Reset() { s.update(func(b *behaviour) { *b = defaultBehaviour() }) }

func (s *Server) update(f func(*behaviour)) {
	s.mu.Lock()
	f(&s.b)
	s.mu.Unlock()
}

func (s *Server) current() behaviour {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b
}

func (s *Server) serve() {
	defer s.wg.Done()
	buf := make([]byte, 1024)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient read error; keep serving
		}
		if n < packetSize || buf[0]&0x7 != modeClient {
			continue
		}
		vn := (buf[0] >> 3) & 0x7
		if vn < 3 || vn > 4 {
			continue
		}
		s.requests.Add(1)
		b := s.current()
		if b.silent {
			continue
		}
		var req [packetSize]byte
		copy(req[:], buf[:packetSize])
		if b.delay <= 0 {
			s.reply(req, from, b)
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			time.Sleep(b.delay)
			s.reply(req, from, b)
		}()
	}
}

// reply builds and sends the answer to req.
func (s *Server) reply(req [packetSize]byte, to net.Addr, b behaviour) {
	wall, _ := s.clock.Now()
	now := wall.Add(b.offset)

	var p [packetSize]byte
	vn := (req[0] >> 3) & 0x7
	leap, stratum := byte(0), b.stratum
	refID := binary.BigEndian.Uint32([]byte("LOCL"))
	if b.notInSync {
		leap = leapNotInSync
	}
	if b.kiss != "" {
		leap, stratum = leapNotInSync, 0
		var code [4]byte
		copy(code[:], b.kiss)
		refID = binary.BigEndian.Uint32(code[:])
	}
	p[0] = leap<<6 | vn<<3 | modeServer
	p[1] = stratum
	p[2] = req[2] // poll: echo the client's
	if p[2] == 0 {
		p[2] = 6
	}
	p[3] = 0xEC // precision: 2^-20 s
	// Root delay 0, root dispersion 0x100 (16.16 seconds, ~3.9ms).
	binary.BigEndian.PutUint32(p[8:12], 0x100)
	binary.BigEndian.PutUint32(p[12:16], refID)
	// Reference time one second ago; origin is the client's transmit
	// timestamp, as sent; receive and transmit are the same reading.
	binary.BigEndian.PutUint64(p[16:24], ntpTime(now.Add(-time.Second)))
	copy(p[24:32], req[40:48])
	binary.BigEndian.PutUint64(p[32:40], ntpTime(now))
	binary.BigEndian.PutUint64(p[40:48], ntpTime(now))
	// Counted before it is sent, so that a client holding the answer
	// always finds it counted (uncounted again if the send fails).
	s.answers.Add(1)
	if _, err := s.conn.WriteTo(p[:], to); err != nil {
		s.answers.Add(^uint64(0))
	}
}

// ntpTime encodes t as an NTP 32.32 timestamp (seconds since 1900, the
// era's wrap-around left to the client as NTP does).
func ntpTime(t time.Time) uint64 {
	secs := uint64(t.Unix() + ntpUnixDelta)
	frac := (uint64(t.Nanosecond())<<32 + 500_000_000) / 1_000_000_000
	return secs<<32 | frac
}

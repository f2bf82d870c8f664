package ntptest_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/beevik/ntp"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/internal/testing/ntptest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func query(t *testing.T, s *ntptest.Server, clock clockguard.Clock) (*ntp.Response, error) {
	t.Helper()
	opt := ntp.QueryOptions{Timeout: 300 * time.Millisecond}
	if clock != nil {
		opt.GetSystemTime = func() time.Time { w, _ := clock.Now(); return w }
	}
	return ntp.QueryWithOptions(s.Addr(), opt)
}

// TestExactOffsetOnFakeClock: on a fake clock that does not move, the
// answer's timestamps are the clock's reading plus the offset, to the
// nanosecond rounding of NTP's 32-bit fraction.
func TestExactOffsetOnFakeClock(t *testing.T) {
	clock := clockguard.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 123456789, time.UTC))
	s := ntptest.NewServer(t, ntptest.WithClock(clock))
	for _, off := range []time.Duration{0, 1500 * time.Millisecond, -250 * time.Millisecond, 37 * time.Second, -2 * time.Hour} {
		s.SetOffset(off)
		r, err := query(t, s, clock)
		if err != nil {
			t.Fatalf("offset %v: %v", off, err)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("offset %v: Validate: %v", off, err)
		}
		if d := r.ClockOffset - off; d < -2 || d > 2 {
			t.Fatalf("offset %v: ClockOffset %v (off by %dns)", off, r.ClockOffset, d)
		}
		w, _ := clock.Now()
		if d := r.Time.Sub(w.Add(off)); d < -2 || d > 2 {
			t.Fatalf("offset %v: transmit time %v, want %v", off, r.Time, w.Add(off))
		}
		if r.Stratum != 1 || r.Leap != ntp.LeapNoWarning {
			t.Fatalf("stratum %d leap %d", r.Stratum, r.Leap)
		}
	}
}

func TestBehaviours(t *testing.T) {
	s := ntptest.NewServer(t)

	s.SetKissOfDeath("RATE")
	r, err := query(t, s, nil)
	if err != nil || !r.IsKissOfDeath() || r.KissCode != "RATE" || !errors.Is(r.Validate(), ntp.ErrKissOfDeath) {
		t.Fatalf("kiss of death: %+v, %v", r, err)
	}
	s.SetKissOfDeath("")

	s.SetNotInSync(true)
	r, err = query(t, s, nil)
	if err != nil || r.Leap != ntp.LeapNotInSync || !errors.Is(r.Validate(), ntp.ErrInvalidLeapSecond) {
		t.Fatalf("not in sync: %+v, %v", r, err)
	}

	s.SetStratum(7)
	s.SetNotInSync(false)
	r, err = query(t, s, nil)
	if err != nil || r.Stratum != 7 || r.Validate() != nil {
		t.Fatalf("stratum 7: %+v, %v", r, err)
	}

	s.SetDelay(60 * time.Millisecond)
	r, err = query(t, s, nil)
	if err != nil || r.RTT < 60*time.Millisecond {
		t.Fatalf("delay 60ms: RTT %v, err %v", r.RTT, err)
	}

	s.Reset()
	s.SetSilent(true)
	before := s.Requests()
	if _, err := query(t, s, nil); err == nil {
		t.Fatal("silent server answered")
	}
	if s.Requests() != before+1 {
		t.Fatalf("silent server counted %d requests, want %d", s.Requests(), before+1)
	}

	s.SetSilent(false)
	if r, err := query(t, s, nil); err != nil || r.Stratum != 1 || r.Validate() != nil {
		t.Fatalf("after Reset: %+v, %v", r, err)
	}
	if s.Answers() != s.Requests()-1 {
		t.Fatalf("answers %d, requests %d: only the silent one unanswered", s.Answers(), s.Requests())
	}
}

func TestIgnoresNonClientPackets(t *testing.T) {
	s := ntptest.NewServer(t)
	c, err := net.Dial("udp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short := []byte{0x23, 0, 0}
	server := make([]byte, 48)
	server[0] = 0x24 // mode 4: a server packet, not a request
	for _, p := range [][]byte{short, server} {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	// A real query after them is still answered, and they were not counted.
	if _, err := query(t, s, nil); err != nil {
		t.Fatal(err)
	}
	if s.Requests() != 1 || s.Answers() != 1 {
		t.Fatalf("requests %d answers %d, want 1 and 1", s.Requests(), s.Answers())
	}
}

func TestStartAndClose(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:123", "localhost:0", "nonsense"} {
		if s, err := ntptest.Start(ntptest.WithAddr(addr)); err == nil {
			s.Close()
			t.Fatalf("Start(%q) accepted a non-loopback address", addr)
		}
	}
	s, err := ntptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr = %q", s.Addr())
	}
	// A fixed address: reuse the port just picked once it is free.
	addr := s.Addr()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s2, err := ntptest.Start(ntptest.WithAddr(addr))
	if err != nil {
		t.Fatalf("Start on %s: %v", addr, err)
	}
	defer s2.Close()
	if s2.Addr() != addr {
		t.Fatalf("Addr = %q, want %q", s2.Addr(), addr)
	}
	if _, err := query(t, s2, nil); err != nil {
		t.Fatal(err)
	}
}

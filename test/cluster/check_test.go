package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
)

// TestCheckHistory feeds the chaos checker crafted histories, each
// breaking one promise, and requires the problem that names it; a clean
// history must pass, so that the checker is neither always red nor
// always green.
func TestCheckHistory(t *testing.T) {
	l, _ := generator.Preset("snowflake")
	id := func(units int64, worker, seq uint64) uint64 {
		v, err := l.Encode(units, 0, worker, seq)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	at := func(units int64) time.Time { return l.Epoch.Add(time.Duration(units) * l.Unit) }
	recv := func(client int, call int64, node string, units int64, worker, seq uint64) Received {
		return Received{ID: id(units, worker, seq), Node: node, At: at(units), Call: call, Client: client}
	}
	holders := func() []*Interval {
		return []*Interval{
			{Node: "a", Generator: "default", Worker: 1, Floor: 1000, Reserved: 5000},
			{Node: "b", Generator: "default", Worker: 2, Floor: 1000, Reserved: 5000},
		}
	}
	clean := func() []Received {
		var got []Received
		for i := range int64(10) {
			got = append(got, recv(1, i, "a", 1001+i, 1, 0), recv(2, i, "b", 1001+i, 2, 0))
		}
		return got
	}
	for _, tc := range []struct {
		name    string
		got     []Received
		holders []*Interval
		want    string // "" for none
	}{
		{"clean", clean(), holders(), ""},
		{"an ID issued twice", append(clean(), recv(3, 0, "b", 1005, 1, 0)), holders(), "DUPLICATE ID"},
		{"one worker's intervals overlap", clean(),
			append(holders(), &Interval{Node: "c", Generator: "default", Worker: 1, Floor: 4000, Reserved: 9000}), "overlaps the next"},
		{"an ID above its holder's reservation", append(clean(), recv(1, 10, "a", 5001, 1, 0)), holders(), "lies in no holder interval"},
		{"an ID at its holder's floor", append(clean(), recv(3, 0, "a", 1000, 1, 7)), holders(), "lies in no holder interval"},
		{"an ID of a worker its node never held", append(clean(), recv(1, 10, "a", 1100, 2, 0)), holders(), "lies in no holder interval"},
		{"a caller's IDs go down on one node", append(clean(), recv(1, 10, "a", 1009, 1, 5)), holders(), "not above"},
		// The order is by call number, not by the order recorded.
		{"a caller's calls recorded out of order, rising by call", append(clean(), recv(1, 11, "a", 1020, 1, 0), recv(1, 10, "a", 1019, 1, 0)), holders(), ""},
		{"a caller's calls recorded in order, falling by call", append(clean(), recv(1, 11, "a", 1019, 1, 0), recv(1, 10, "a", 1020, 1, 0)), holders(), "not above"},
		{"a slow call: an ID made as it began, received 5 s later", append(clean(),
			Received{ID: id(1200, 1, 0), Node: "a", Sent: at(1200).Add(-time.Millisecond), At: at(1200).Add(5 * time.Second), Call: 10, Client: 1}),
			holders(), ""},
		{"an ID led by max-lead", append(clean(), Received{ID: id(1200, 1, 0), Node: "a", At: at(1200).Add(-time.Second), Call: 10, Client: 1}),
			holders(), ""},
		{"an ID older than its call", append(clean(),
			Received{ID: id(1200, 1, 0), Node: "a", Sent: at(1200).Add(time.Second), At: at(1200).Add(time.Second + time.Millisecond), Call: 10, Client: 1}),
			holders(), "before its call began"},
		{"an ID too far ahead of its receipt", append(clean(), Received{ID: id(1200, 1, 0), Node: "a", At: at(1200).Add(-1200 * time.Millisecond), Call: 10, Client: 1}),
			holders(), "after its receipt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, _ := CheckHistory(l, tc.got, tc.holders, Bounds{MaxLead: time.Second, MaxStaleness: 100 * time.Millisecond})
			switch {
			case tc.want == "" && len(res.Problems) > 0:
				t.Fatalf("a clean history has problems: %v", res.Problems)
			case tc.want == "":
			case len(res.Problems) == 0:
				t.Fatalf("no problem found; want %q", tc.want)
			case !strings.Contains(strings.Join(res.Problems, "\n"), tc.want):
				t.Fatalf("problems %v; want one naming %q", res.Problems, tc.want)
			}
			if res.IDs != len(tc.got) {
				t.Fatalf("checked %d IDs of %d", res.IDs, len(tc.got))
			}
		})
	}
}

// TestCauseless: a refusal without its ErrorInfo reason is caught, as
// any code other than a deadline or a transport failure; a refusal
// naming its cause, a caller's deadline and a broken connection are not.
func TestCauseless(t *testing.T) {
	for _, tc := range []struct {
		f    Failure
		want bool
	}{
		{Failure{Code: codes.Unavailable, Msg: `generator "default" not serving: clock rolled back 2s`}, true},
		{Failure{Code: codes.ResourceExhausted, Msg: "overloaded"}, true},
		{Failure{Code: codes.Internal, Msg: "a fault"}, true},
		{Failure{Code: codes.Unavailable, Msg: `generator "default" not serving: clock rolled back 2s`, Reason: "CLOCK_ROLLBACK"}, false},
		{Failure{Code: codes.ResourceExhausted, Msg: "overloaded", Reason: "OVERLOADED"}, false},
		{Failure{Code: codes.DeadlineExceeded, Msg: "context deadline exceeded"}, false},
		{Failure{Code: codes.Unavailable, Msg: "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\""}, false},
		{Failure{Code: codes.Unavailable, Msg: "error reading from server: EOF"}, false},
		// A node's own refusal without its ErrorInfo, whose cause quotes a
		// transport's words (the coordinator's dial, a read cut short): no
		// transport failure of the call, a refusal that does not say why.
		{Failure{Code: codes.Unavailable, Msg: `generator "default" not serving: coordinator unavailable: dial tcp 127.0.0.1:2379: connect: connection refused`}, true},
		{Failure{Code: codes.Unavailable, Msg: `generator "orders" not serving: claim failed: unexpected EOF`}, true},
		{Failure{Code: codes.Unavailable, Msg: `generator "default" not serving: lease renewal failed: read tcp 127.0.0.1:40112->127.0.0.1:2379: read: connection reset by peer`}, true},
	} {
		if got := tc.f.causeless(); got != tc.want {
			t.Errorf("%s %q (reason %q): causeless %v, want %v", tc.f.Code, tc.f.Msg, tc.f.Reason, got, tc.want)
		}
	}
}

// TestFaultWindow: a scenario expects a failure only on the faulted node,
// inside the fault's window, and with one of the fault's causes; a
// failure without a cause only where the fault cuts the node off.
func TestFaultWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	x := fault{node: "n1", from: t0, causes: []clockguard.Code{clockguard.CodeClockRollback}}.until(t0.Add(time.Second))
	rollback := func(node string, at time.Duration) Failure {
		return Failure{Node: node, Code: codes.Unavailable, Msg: "clock rolled back", Reason: "CLOCK_ROLLBACK", At: t0.Add(at)}
	}
	for _, tc := range []struct {
		name string
		x    fault
		f    Failure
		want bool
	}{
		{"inside, its cause", x, rollback("n1", 500*time.Millisecond), true},
		{"at the end of the call deadline after ready", x, rollback("n1", time.Second+callDeadline), true},
		{"after it", x, rollback("n1", time.Second+callDeadline+time.Millisecond), false},
		{"before it", x, rollback("n1", -time.Millisecond), false},
		{"another node", x, rollback("n2", 500*time.Millisecond), false},
		{"another cause", x, Failure{Node: "n1", Code: codes.Unavailable, Reason: "LEASE_LOST", At: t0.Add(time.Millisecond)}, false},
		{"a deadline, the node not cut off", x, Failure{Node: "n1", Code: codes.DeadlineExceeded, At: t0.Add(time.Millisecond)}, false},
		{"a deadline, the node cut off", fault{node: "n1", from: t0, cutOff: true}, Failure{Node: "n1", Code: codes.DeadlineExceeded, At: t0.Add(time.Hour)}, true},
	} {
		if got := within(tc.x)(tc.f); got != tc.want {
			t.Errorf("%s: expected %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckSegment: a segment generator's IDs (numbers from a counter)
// are checked for uniqueness within the generator and for order per
// caller and node process; never decoded as a layout. Each broken history
// must show its problem, a clean one none.
func TestCheckSegment(t *testing.T) {
	l, _ := generator.Preset("snowflake")
	seg := func(client int, call int64, node string, run int, id uint64) Received {
		return Received{ID: id, Node: node, Generator: "orders", Run: run, Call: call, Client: client, At: l.Epoch}
	}
	clean := func() []Received {
		var got []Received
		for i := range int64(10) {
			got = append(got, seg(1, i, "a", 1, 1000+uint64(i)), seg(2, i, "b", 1, 2000+uint64(i)))
		}
		return got
	}
	b := Bounds{MaxLead: time.Second, MaxStaleness: 100 * time.Millisecond, Segment: []string{"orders"}}
	for _, tc := range []struct {
		name string
		got  []Received
		b    Bounds
		want string // "" for none
	}{
		{"clean", clean(), b, ""},
		{"the same IDs taken for a layout's", clean(), Bounds{MaxLead: time.Second, MaxStaleness: 100 * time.Millisecond}, "lies in no holder interval"},
		{"an ID given out twice", append(clean(), seg(3, 0, "b", 1, 1004)), b, "DUPLICATE ID 1004 of generator orders"},
		{"the same number from another generator", append(clean(), Received{ID: 1004, Node: "b", Generator: "other", Run: 1, Client: 3, At: l.Epoch}),
			Bounds{MaxLead: time.Second, MaxStaleness: 100 * time.Millisecond, Segment: []string{"orders", "other"}}, ""},
		{"a caller's IDs go down within one process", append(clean(), seg(1, 10, "a", 1, 1005)), b, "not above"},
		{"a caller's IDs go down across a restart", append(clean(), seg(1, 10, "a", 2, 500)), b, ""},
		{"a call a restart came between", append(clean(), seg(1, 10, "a", 0, 500)), b, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, _ := CheckHistory(l, tc.got, nil, tc.b)
			switch {
			case tc.want == "" && len(res.Problems) > 0:
				t.Fatalf("a clean history has problems: %v", res.Problems)
			case tc.want == "":
			case len(res.Problems) == 0:
				t.Fatalf("no problem found; want %q", tc.want)
			case !strings.Contains(strings.Join(res.Problems, "\n"), tc.want):
				t.Fatalf("problems %v; want one naming %q", res.Problems, tc.want)
			}
		})
	}
}

// TestCheckCounter: the segment IDs received against the counter the
// coordinator keeps after every node stopped gracefully. A clean history
// is dense; each broken one shows its problem.
func TestCheckCounter(t *testing.T) {
	def := segment.Definition{Start: 1000, Max: segment.MaxID}
	ids := func(from, to uint64, skip ...uint64) []Received {
		var got []Received
		for id := from; id <= to; id++ {
			if !slices.Contains(skip, id) {
				got = append(got, Received{ID: id, Node: "a", Generator: "orders"})
			}
		}
		return append(got, Received{ID: 7, Node: "a", Generator: "default"}) // another generator's: ignored
	}
	// 1000..1099 given out, 1100..1149 handed back, 1150..1199 given out.
	counter := segment.Counter{Next: 1200, Seq: 9, Free: []segment.Range{{First: 1100, Last: 1149}}}
	given := func(skip ...uint64) []Received {
		return append(ids(1000, 1099, skip...), ids(1150, 1199, skip...)...)
	}
	for _, tc := range []struct {
		name     string
		got      []Received
		c        segment.Counter
		exact    bool
		u        Unknown
		want     string // "" for none
		wantLost uint64
	}{
		{"dense", given(), counter, true, Unknown{}, "", 0},
		{"one ID lost", given(1050), counter, true, Unknown{}, "1 IDs of orders lost", 1},
		{"one ID lost, not exact", given(1050), counter, false, Unknown{}, "", 1},
		{"one ID lost, given to a call of unknown outcome", given(1050), counter, true, Unknown{Calls: 1}, "", 1},
		{"two IDs lost, one call of unknown outcome", given(1050, 1052), counter, true, Unknown{Calls: 1}, "2 IDs of orders lost", 2},
		{"the remainder lost (not handed back)", given(), segment.Counter{Next: 1200, Seq: 9}, true, Unknown{}, "50 IDs of orders lost", 50},
		{"a claim lost, one failed claim", given(), segment.Counter{Next: 1200, Seq: 9}, true, Unknown{Claims: 1}, "", 50},
		{"a claim and an ID lost, one failed claim", given(1050), segment.Counter{Next: 1200, Seq: 9}, true, Unknown{Claims: 1}, "51 IDs of orders lost", 51},
		{"a claim and an ID lost, one failed claim, one call", given(1050), segment.Counter{Next: 1200, Seq: 9}, true, Unknown{Calls: 1, Claims: 1}, "", 51},
		{"an ID handed out and handed back", append(given(), Received{ID: 1120, Node: "b", Generator: "orders"}), counter, false, Unknown{}, "lies in the free range [1100, 1149]", 0},
		{"an ID never claimed", append(given(), Received{ID: 1200, Node: "b", Generator: "orders"}), counter, false, Unknown{}, "never claimed", 0},
		{"an ID below the start", append(given(), Received{ID: 999, Node: "b", Generator: "orders"}), counter, false, Unknown{}, "below the definition's start", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, lost := CheckCounter(tc.got, "orders", def, tc.c, tc.exact, tc.u)
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Fatalf("a clean history has problems: %v", problems)
			case tc.want == "":
			case len(problems) == 0:
				t.Fatalf("no problem found; want %q", tc.want)
			case !strings.Contains(strings.Join(problems, "\n"), tc.want):
				t.Fatalf("problems %v; want one naming %q", problems, tc.want)
			}
			if lost != tc.wantLost {
				t.Fatalf("lost %d, want %d", lost, tc.wantLost)
			}
		})
	}
}

package cluster

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
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

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/ntptest"
	"github.com/firnid/firn/server/core"
)

// wantCode fails unless err is a gRPC status with code c whose message
// holds every one of parts.
func wantCode(t *testing.T, what string, err error, c codes.Code, parts ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("%s: got %v, want %v", what, err, c)
	}
	if st.Code() != c {
		t.Fatalf("%s: code %v (%q), want %v", what, st.Code(), st.Message(), c)
	}
	for _, p := range parts {
		if !strings.Contains(st.Message(), p) {
			t.Fatalf("%s: message %q does not name %q", what, st.Message(), p)
		}
	}
}

// wantInfo fails unless err carries google.rpc.ErrorInfo with domain
// firn.v1.IDService,
// the reason, and (at least) the metadata given; it returns the RetryInfo,
// if any.
func wantInfo(t *testing.T, what string, err error, reason string, meta map[string]string) *errdetails.RetryInfo {
	t.Helper()
	st, _ := status.FromError(err)
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	if info == nil {
		t.Fatalf("%s: %v carries no ErrorInfo (details %v)", what, err, st.Details())
	}
	if info.GetDomain() != "firn.v1.IDService" || info.GetReason() != reason {
		t.Fatalf("%s: ErrorInfo %v, want domain firn.v1.IDService, reason %s", what, info, reason)
	}
	if _, ok := firnv1.ErrorReason_value[info.GetReason()]; !ok {
		t.Fatalf("%s: reason %q is not in the proto's ErrorReason list", what, info.GetReason())
	}
	for k, v := range meta {
		if got, ok := info.GetMetadata()[k]; !ok || got != v {
			t.Fatalf("%s: ErrorInfo metadata %v, want %s=%q", what, info.GetMetadata(), k, v)
		}
	}
	return retry
}

// httpErr is the HTTP API's error body.
type httpErr struct {
	Error struct {
		Code         string            `json:"code"`
		Reason       string            `json:"reason"`
		Message      string            `json:"message"`
		RetryAfterMS int64             `json:"retry_after_ms"`
		Metadata     map[string]string `json:"metadata"`
	} `json:"error"`
}

// wantHTTP fails unless GET path answers status with a JSON error of the
// reason whose message holds every one of parts.
func wantHTTP(t *testing.T, n *tnode, path string, status int, reason string, parts ...string) httpErr {
	t.Helper()
	resp, body := httpDo(t, n, path)
	return checkHTTP(t, path, resp, body, status, reason, parts...)
}

// httpDo GETs path from n and reads the whole body.
func httpDo(t *testing.T, n *tnode, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := n.httpc.Get(n.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp, body
}

// checkHTTP is wantHTTP for an answer already read.
func checkHTTP(t *testing.T, path string, resp *http.Response, body []byte, status int, reason string, parts ...string) httpErr {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, body, status)
	}
	var e httpErr
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Code == "" {
		t.Fatalf("GET %s: body %q is not a JSON error", path, body)
	}
	if e.Error.Reason != reason {
		t.Fatalf("GET %s: reason %q, want %s (body %s)", path, e.Error.Reason, reason, body)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("GET %s: Cache-Control %q, want no-store", path, cc)
	}
	if ra := resp.Header.Get("Retry-After"); (ra != "") != (e.Error.RetryAfterMS > 0) {
		t.Fatalf("GET %s: Retry-After %q with retry_after_ms %d: both or neither", path, ra, e.Error.RetryAfterMS)
	}
	for _, p := range parts {
		if !strings.Contains(e.Error.Message, p) {
			t.Fatalf("GET %s: error %q does not name %q", path, e.Error.Message, p)
		}
	}
	return e
}

// The gRPC code and ErrorInfo lists agree: every code a serving state
// reports is an ErrorReason of the API, and every ErrorReason (but the
// zero value) is one the node can send.
func TestErrorReasonsMatchTheProto(t *testing.T) {
	ours := map[string]bool{"NOT_FOUND": true, "BAD_REQUEST": true, "OVERLOADED": true, "WRONG_NODE": true, "SECTION_MOVING": true, "PERMISSION_DENIED": true}
	for _, c := range clockguard.Codes {
		ours[string(c)] = true
	}
	for name, v := range firnv1.ErrorReason_value {
		if v != 0 && !ours[name] {
			t.Errorf("ErrorReason %s is in the proto but the node never sends it", name)
		}
	}
	for name := range ours {
		if _, ok := firnv1.ErrorReason_value[name]; !ok {
			t.Errorf("reason %s is sent by the node but missing from the proto's ErrorReason", name)
		}
	}
}

// Every error code of the API, gRPC and HTTP, on a serving node.
func TestErrorCodes(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.MaxBatch = 1000 },
		generators("default=snowflake", "user=compact"))
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "user", 10*time.Second)
	// compact: 64 IDs per 1s unit × 2 units in max-lead (max(1s, 2 units)).
	if mb := n.genInfo(t, "user").GetMaxBatch(); mb != 128 {
		t.Fatalf("user max batch %d, want min(1000, 64 × 2) = 128", mb)
	}
	if mb := n.genInfo(t, "default").GetMaxBatch(); mb != 1000 {
		t.Fatalf("default max batch %d, want --max-batch 1000", mb)
	}

	c := ctx(t)
	_, err := n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 0})
	wantCode(t, "count 0", err, codes.InvalidArgument, "count 0", "[1, 1000]")
	wantInfo(t, "count 0", err, "BAD_REQUEST", map[string]string{"field": "count", "value": "0", "limit": "[1, 1000]"})
	var br *errdetails.BadRequest
	for _, d := range status.Convert(err).Details() {
		if d, ok := d.(*errdetails.BadRequest); ok {
			br = d
		}
	}
	if v := br.GetFieldViolations(); len(v) != 1 || v[0].GetField() != "count" || !strings.Contains(v[0].GetDescription(), "[1, 1000]") {
		t.Fatalf("count 0: google.rpc.BadRequest %v, want one violation of field count naming its bound", br)
	}
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 1001})
	wantCode(t, "count 1001", err, codes.InvalidArgument, "count 1001", "[1, 1000]")
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Generator: "user", Count: 129})
	wantCode(t, "user count 129", err, codes.InvalidArgument, "[1, 128]", "user")
	wantInfo(t, "user count 129", err, "BAD_REQUEST", map[string]string{"limit": "[1, 128]"})
	if resp, err := n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 1000}); err != nil || len(resp.GetIds()) != 1000 {
		t.Fatalf("count at the bound: %d IDs, %v", len(resp.GetIds()), err)
	}

	_, err = n.ids.NextID(c, &firnv1.NextIDRequest{Generator: "nope"})
	wantCode(t, "NextID unknown generator", err, codes.NotFound, `"nope"`)
	wantInfo(t, "NextID unknown generator", err, "NOT_FOUND", map[string]string{"generator": "nope", "known": "default,user"})
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Generator: "nope", Count: 1})
	wantCode(t, "NextIDs unknown generator", err, codes.NotFound, `"nope"`)
	_, err = n.ids.Decode(c, &firnv1.DecodeRequest{Generator: "nope", Id: 1})
	wantCode(t, "Decode unknown generator", err, codes.NotFound, `"nope"`)

	// Garbage decode: the sign bit for snowflake (63 bits), bit 50 for
	// compact (42 bits).
	_, err = n.ids.Decode(c, &firnv1.DecodeRequest{Id: 1 << 63})
	wantCode(t, "decode of the sign bit", err, codes.InvalidArgument)
	wantInfo(t, "decode of the sign bit", err, "BAD_REQUEST", map[string]string{"field": "id"})
	_, err = n.ids.Decode(c, &firnv1.DecodeRequest{Generator: "user", Id: 1 << 50})
	wantCode(t, "decode above compact's 42 bits", err, codes.InvalidArgument)

	// Oversize request message: beyond the server's receive limit.
	_, err = n.ids.NextID(c, &firnv1.NextIDRequest{Generator: strings.Repeat("x", 100<<10)})
	wantCode(t, "oversize request", err, codes.ResourceExhausted)
	// The node is unharmed.
	if _, err := n.ids.NextID(c, &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID after the oversize request: %v", err)
	}

	// The lead used (compact issues 64 IDs a second, 2 s ahead at most): a
	// call whose IDs would need the clock past its deadline is refused at
	// once, OVERLOADED (the demand, not the reservation), naming max-lead,
	// with RetryInfo the wait.
	var ahead error
	for i := 0; i < 20 && ahead == nil; i++ {
		short, cancel := context.WithTimeout(c, 300*time.Millisecond)
		_, ahead = n.ids.NextIDs(short, &firnv1.NextIDsRequest{Generator: "user", Count: 128})
		cancel()
	}
	wantCode(t, "user at its lead limit", ahead, codes.ResourceExhausted, "ahead of the clock", "max-lead 2s", "past the caller's deadline")
	retry := wantInfo(t, "user at its lead limit", ahead, "OVERLOADED", map[string]string{"bound": "max-lead", "limit_ms": "2000"})
	if d := retry.GetRetryDelay().AsDuration(); d <= 300*time.Millisecond || d > 3*time.Second {
		t.Fatalf("lead limit: retry delay %v, want the wait for the clock, in (300ms, 3s]", d)
	}

	// HTTP equivalents.
	wantHTTP(t, n, "/v1/ids?count=0", 400, "BAD_REQUEST", "count 0", "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?count=1001", 400, "BAD_REQUEST", "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?count=-5", 400, "BAD_REQUEST", "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?count=abc", 400, "BAD_REQUEST", `"abc"`, "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?generator=user&count=129", 400, "BAD_REQUEST", "[1, 128]")
	wantHTTP(t, n, "/v1/ids?generator=nope", 404, "NOT_FOUND", `"nope"`)
	wantHTTP(t, n, "/v1/decode/abc", 400, "BAD_REQUEST", `"abc"`)
	wantHTTP(t, n, "/v1/decode/-1", 400, "BAD_REQUEST")
	wantHTTP(t, n, "/v1/decode/18446744073709551616", 400, "BAD_REQUEST")
	wantHTTP(t, n, fmt.Sprintf("/v1/decode/%d", uint64(1)<<63), 400, "BAD_REQUEST")
	wantHTTP(t, n, fmt.Sprintf("/v1/decode/%d?generator=user", uint64(1)<<50), 400, "BAD_REQUEST")
	wantHTTP(t, n, "/v1/decode/1?generator=nope", 404, "NOT_FOUND", `"nope"`)
}

// A generator that is not serving answers UNAVAILABLE (HTTP 503) with the
// reason in the message; /readyz says 503 with the same reason as Info.
func TestNotServingIsUnavailableWithReason(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	ntp := ntptest.NewServer(t)
	ntp.SetOffset(2 * time.Second) // beyond --max-clock-offset 250ms
	n := startNode(t, e.Endpoints, t.TempDir(), ntpServers(time.Second, ntp.Addr()))

	// Wait for the NTP verdict (the reason names the offset) to be the only
	// cause left: the start-up holds (the first peer check, the worker ID
	// acquisition) are transient and would change the reason mid-test.
	var info *firnv1.GeneratorInfo
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		info = n.genInfo(t, "")
		r := info.GetReason()
		if strings.Contains(r, "NTP offset") && !strings.Contains(r, "live peers") && !strings.Contains(r, "acquiring") {
			break
		}
	}
	if info.GetServing() || !strings.Contains(info.GetReason(), "--max-clock-offset 250ms") {
		t.Fatalf("generator serving=%v reason %q, want not serving for the NTP offset", info.GetServing(), info.GetReason())
	}
	reason := info.GetReason()

	c := ctx(t)
	_, err := n.ids.NextID(c, &firnv1.NextIDRequest{})
	wantCode(t, "NextID not serving", err, codes.Unavailable, reason)
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 10})
	wantCode(t, "NextIDs not serving", err, codes.Unavailable, reason)
	wantInfo(t, "NextIDs not serving", err, "NTP_OFFSET", map[string]string{"generator": "default", "limit_ms": "250"})
	// Validation still comes first, and Decode needs no serving generator.
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 0})
	wantCode(t, "count 0 while not serving", err, codes.InvalidArgument)
	if _, err := n.ids.Decode(c, &firnv1.DecodeRequest{Id: 12345}); err != nil {
		t.Fatalf("Decode while not serving: %v", err)
	}

	if info.GetCause() != "NTP_OFFSET" {
		t.Fatalf("Info cause %q, want NTP_OFFSET", info.GetCause())
	}
	wantHTTP(t, n, "/v1/ids", 503, "NTP_OFFSET", reason)
	if e := wantHTTP(t, n, "/v1/ids?count=5", 503, "NTP_OFFSET", reason); e.Error.Code != "UNAVAILABLE" || e.Error.Metadata["limit_ms"] != "250" || e.Error.Metadata["measured_ms"] == "" {
		t.Fatalf("HTTP error %+v: want UNAVAILABLE with the limit and the measured offset", e)
	}
	code, body := httpGet(t, n.httpc, n.base+"/readyz")
	if code != 503 {
		t.Fatalf("/readyz %d %s while not serving", code, body)
	}
	var ready struct {
		Ready      bool `json:"ready"`
		Generators []struct {
			Name, State, Reason, Cause string
			Serving                    bool
		} `json:"generators"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || len(ready.Generators) != 1 {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	if g := ready.Generators[0]; ready.Ready || g.Serving || g.Name != "default" || !strings.Contains(g.Reason, "NTP offset") || g.Cause != "NTP_OFFSET" {
		t.Fatalf("/readyz says %+v, Info says reason %q", ready, reason)
	}

	// The status page says so, with the reason.
	code, page := httpGet(t, n.httpc, n.base+"/")
	if code != 200 || !strings.Contains(page, "NOT SERVING") || !strings.Contains(page, "NTP offset") {
		t.Fatalf("status page %d while not serving:\n%s", code, page)
	}

	// The clock agrees again: the node serves.
	ntp.SetOffset(0)
	waitServing(t, n.ids, "", 10*time.Second)
	if _, err := n.ids.NextID(c, &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID after NTP agreed: %v", err)
	}
	if code, body := httpGet(t, n.httpc, n.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s while serving", code, body)
	}
}

// A node that knows when it will serve again says so: restarted with its
// clock 8 s behind its own last reservation, it waits for the clock to
// reach it, and each refusal meanwhile carries RetryInfo (gRPC) and
// Retry-After (HTTP) with the remaining wait.
func TestRefusalCarriesRetryInfo(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	dir := t.TempDir()
	n1 := startNamedNode(t, "retry", e.Endpoints, dir)
	waitServing(t, n1.ids, "", 10*time.Second)
	if _, err := n1.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 100}); err != nil {
		t.Fatal(err)
	}
	n1.stop()

	n2 := startNamedNode(t, "retry", e.Endpoints, dir, faultInjection,
		func(c *core.Config) { c.FaultClockOffset = -8 * time.Second })
	var retry *errdetails.RetryInfo
	for start := time.Now(); retry == nil; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("no refusal with RetryInfo within 5 s; reason %q", n2.genInfo(t, "").GetReason())
		}
		_, err := n2.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
		if err == nil {
			t.Fatal("served 8 s behind its own last reservation")
		}
		wantCode(t, "NextID while waiting for the clock", err, codes.Unavailable)
		if st, _ := status.FromError(err); strings.Contains(st.Message(), "for the clock to reach") {
			retry = wantInfo(t, "NextID while waiting for the clock", err, "STARTING", map[string]string{"limit_ms": "1000"})
		}
	}
	if d := retry.GetRetryDelay().AsDuration(); d <= 0 || d > 10*time.Second {
		t.Fatalf("retry delay %v, want the remaining wait in (0, 10s]", d)
	}
	h := wantHTTP(t, n2, "/v1/ids", 503, "STARTING", "for the clock to reach")
	if h.Error.RetryAfterMS <= 0 || h.Error.RetryAfterMS > 10_000 {
		t.Fatalf("retry_after_ms %d, want the remaining wait in (0, 10000]", h.Error.RetryAfterMS)
	}

	// The clock is corrected: the wait ends at its next reading.
	n2.setOffset(t, 0)
	waitServing(t, n2.ids, "", 5*time.Second)
}

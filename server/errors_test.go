package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/clockguard/ntptest"
	"github.com/firnid/firn/coordinator/etcd/etcdtest"
	firnv1 "github.com/firnid/firn/proto/firn/v1"
	"github.com/firnid/firn/server"
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

// wantHTTP fails unless GET path answers status with a JSON error whose
// text holds every one of parts.
func wantHTTP(t *testing.T, n *tnode, path string, status int, parts ...string) {
	t.Helper()
	code, body := httpGet(t, n.httpc, n.base+path)
	if code != status {
		t.Fatalf("GET %s: %d %s, want %d", path, code, body, status)
	}
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
		t.Fatalf("GET %s: body %q is not a JSON error", path, body)
	}
	for _, p := range parts {
		if !strings.Contains(e.Error, p) {
			t.Fatalf("GET %s: error %q does not name %q", path, e.Error, p)
		}
	}
}

// Every error code of the API, gRPC and HTTP, on a serving node.
func TestErrorCodes(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *server.Config) { c.MaxBatch = 1000 },
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
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 1001})
	wantCode(t, "count 1001", err, codes.InvalidArgument, "count 1001", "[1, 1000]")
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Generator: "user", Count: 129})
	wantCode(t, "user count 129", err, codes.InvalidArgument, "[1, 128]", "user")
	if resp, err := n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 1000}); err != nil || len(resp.GetIds()) != 1000 {
		t.Fatalf("count at the bound: %d IDs, %v", len(resp.GetIds()), err)
	}

	_, err = n.ids.NextID(c, &firnv1.NextIDRequest{Generator: "nope"})
	wantCode(t, "NextID unknown generator", err, codes.NotFound, `"nope"`)
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Generator: "nope", Count: 1})
	wantCode(t, "NextIDs unknown generator", err, codes.NotFound, `"nope"`)
	_, err = n.ids.Decode(c, &firnv1.DecodeRequest{Generator: "nope", Id: 1})
	wantCode(t, "Decode unknown generator", err, codes.NotFound, `"nope"`)

	// Garbage decode: the sign bit for snowflake (63 bits), bit 50 for
	// compact (42 bits).
	_, err = n.ids.Decode(c, &firnv1.DecodeRequest{Id: 1 << 63})
	wantCode(t, "decode of the sign bit", err, codes.InvalidArgument)
	_, err = n.ids.Decode(c, &firnv1.DecodeRequest{Generator: "user", Id: 1 << 50})
	wantCode(t, "decode above compact's 42 bits", err, codes.InvalidArgument)

	// Oversize request message: beyond the server's receive limit.
	_, err = n.ids.NextID(c, &firnv1.NextIDRequest{Generator: strings.Repeat("x", 100<<10)})
	wantCode(t, "oversize request", err, codes.ResourceExhausted)
	// The node is unharmed.
	if _, err := n.ids.NextID(c, &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID after the oversize request: %v", err)
	}

	// HTTP equivalents.
	wantHTTP(t, n, "/v1/ids?count=0", 400, "count 0", "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?count=1001", 400, "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?count=-5", 400, "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?count=abc", 400, `"abc"`, "[1, 1000]")
	wantHTTP(t, n, "/v1/ids?generator=user&count=129", 400, "[1, 128]")
	wantHTTP(t, n, "/v1/ids?generator=nope", 404, `"nope"`)
	wantHTTP(t, n, "/v1/decode/abc", 400, `"abc"`)
	wantHTTP(t, n, "/v1/decode/-1", 400)
	wantHTTP(t, n, "/v1/decode/18446744073709551616", 400)
	wantHTTP(t, n, fmt.Sprintf("/v1/decode/%d", uint64(1)<<63), 400)
	wantHTTP(t, n, fmt.Sprintf("/v1/decode/%d?generator=user", uint64(1)<<50), 400)
	wantHTTP(t, n, "/v1/decode/1?generator=nope", 404, `"nope"`)
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
	// Validation still comes first, and Decode needs no serving generator.
	_, err = n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 0})
	wantCode(t, "count 0 while not serving", err, codes.InvalidArgument)
	if _, err := n.ids.Decode(c, &firnv1.DecodeRequest{Id: 12345}); err != nil {
		t.Fatalf("Decode while not serving: %v", err)
	}

	wantHTTP(t, n, "/v1/ids", 503, reason)
	wantHTTP(t, n, "/v1/ids?count=5", 503, reason)
	code, body := httpGet(t, n.httpc, n.base+"/readyz")
	if code != 503 {
		t.Fatalf("/readyz %d %s while not serving", code, body)
	}
	var ready struct {
		Ready      bool `json:"ready"`
		Generators []struct {
			Name, State, Reason string
			Serving             bool
		} `json:"generators"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || len(ready.Generators) != 1 {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	if g := ready.Generators[0]; ready.Ready || g.Serving || g.Name != "default" || !strings.Contains(g.Reason, "NTP offset") {
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

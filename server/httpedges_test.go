package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// httpErrorBody is the API's JSON error, as a test reads it.
type httpErrorBody struct {
	Error struct {
		Code     string            `json:"code"`
		Reason   string            `json:"reason"`
		Message  string            `json:"message"`
		Metadata map[string]string `json:"metadata"`
	} `json:"error"`
}

// TestHTTPQueryStrict: a query the node cannot parse whole is refused,
// naming the bad part — never served as another request (the default
// generator instead of msg, one ID instead of five).
func TestHTTPQueryStrict(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "msg=snowflake"))
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "msg", 10*time.Second)

	for _, c := range []struct{ query, names string }{
		{"generator=msg%&count=2", "query"},
		{"generator=msg;&count=2", "query"},
		{"count=5%", "query"},
		{"count=3;x=1", "query"},
		{"count=3&count=abc", "count"},
		{"count=3&count=3", "count"},
		{"count=", "count"},
		{"count", "count"},
		{"count=2&gen=msg", "gen"},
	} {
		code, body := httpGet(t, n.httpc, n.base+"/v1/ids?"+c.query)
		if code != 400 {
			t.Errorf("GET /v1/ids?%s: %d %s, want 400", c.query, code, body)
			continue
		}
		var e httpErrorBody
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "INVALID_ARGUMENT" || e.Error.Metadata["field"] != c.names {
			t.Errorf("GET /v1/ids?%s: %s, want INVALID_ARGUMENT naming %q", c.query, body, c.names)
		}
	}
	if code, body := httpGet(t, n.httpc, n.base+"/v1/decode/1?generator=msg%"); code != 400 {
		t.Errorf("GET /v1/decode/1?generator=msg%%: %d %s, want 400", code, body)
	}
	// generator= is the default generator, as documented.
	if code, body := httpGet(t, n.httpc, n.base+"/v1/ids?generator=&count=2"); code != 200 {
		t.Errorf("GET /v1/ids?generator=&count=2: %d %s, want the default generator's", code, body)
	}
	// The well-formed request is served, by the generator it names.
	code, body := httpGet(t, n.httpc, n.base+"/v1/ids?generator=msg&count=5")
	if code != 200 || len(parseIDs(t, body, 5)) != 5 {
		t.Fatalf("GET /v1/ids?generator=msg&count=5: %d %s", code, body)
	}
}

// TestHTTPHeadIssuesNothing: HEAD /v1/ids checks the request as GET does
// and issues no ID.
func TestHTTPHeadIssuesNothing(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	issued := func() float64 {
		return value(t, scrape(t, n.httpc, n.base), "firn_ids_issued_total", map[string]string{"generator": "default"})
	}
	before := issued()
	for _, path := range []string{"/v1/ids?count=1000", "/v1/ids?count=1000", "/v1/ranges?count=100000"} {
		resp, err := n.httpc.Head(n.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("HEAD %s: %s, Cache-Control %q", path, resp.Status, resp.Header.Get("Cache-Control"))
		}
	}
	if after := issued(); after != before {
		t.Fatalf("HEAD issued %v IDs", after-before)
	}
	resp, err := n.httpc.Head(n.base + "/v1/ids?count=0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("HEAD /v1/ids?count=0: %s, want 400 as GET", resp.Status)
	}
}

// TestHTTPRanges: GET /v1/ranges answers count IDs as increasing runs,
// above the IDs issued before it and below those issued after, and refuses
// a count beyond the generator's max range naming the bound.
func TestHTTPRanges(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	getJSON := func(path string, v any) int {
		t.Helper()
		resp, err := n.httpc.Get(n.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(body, v); err != nil {
				t.Fatalf("GET %s: %q: %v", path, body, err)
			}
		} else if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: error body %q is not JSON: %v", path, body, err)
		}
		return resp.StatusCode
	}
	var before, after struct{ IDs []string }
	var got struct {
		Runs []struct {
			First string
			Count uint64
		}
	}
	getJSON("/v1/ids", &before)
	const count = 50_000
	if code := getJSON(fmt.Sprintf("/v1/ranges?count=%d", count), &got); code != 200 {
		t.Fatalf("GET /v1/ranges?count=%d: %d", count, code)
	}
	getJSON("/v1/ids", &after)
	low, _ := strconv.ParseUint(before.IDs[0], 10, 64)
	high, _ := strconv.ParseUint(after.IDs[0], 10, 64)
	total, prev := uint64(0), low
	for i, r := range got.Runs {
		first, err := strconv.ParseUint(r.First, 10, 64)
		if err != nil || r.Count == 0 || first <= prev || first+r.Count-1 >= high {
			t.Fatalf("run %d of %d: %+v after %d (before the call %d, after it %d): want increasing runs between them", i, len(got.Runs), r, prev, low, high)
		}
		prev, total = first+r.Count-1, total+r.Count
	}
	if total != count {
		t.Fatalf("the runs hold %d IDs, want %d", total, count)
	}
	var refused struct {
		Error struct {
			Reason   string
			Metadata map[string]string
		}
	}
	if code := getJSON("/v1/ranges?count=18446744073709551615", &refused); code != 400 || refused.Error.Reason != "BAD_REQUEST" ||
		refused.Error.Metadata["field"] != "count" || !strings.HasPrefix(refused.Error.Metadata["limit"], "[1, ") {
		t.Fatalf("GET /v1/ranges beyond the max range: %d %+v; want 400 naming count and its bound", code, refused)
	}
	t.Logf("%d IDs in %d runs", count, len(got.Runs))
}

// TestHTTPEchoBounded: an error repeats at most a short prefix of what
// the caller sent, however long; a request target beyond 8 KiB is 414.
func TestHTTPEchoBounded(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	long := strings.Repeat("g", 7000)
	for _, u := range []string{"/v1/ids?generator=" + long, "/v1/ids?count=" + long, "/v1/decode/" + long, "/v1/ids?" + long + "=1", "/" + long} {
		code, body := httpGet(t, n.httpc, n.base+u)
		if code != 400 && code != 404 {
			t.Errorf("GET %s…: %d, want 400 or 404", u[:20], code)
		}
		if len(body) > 1000 {
			t.Errorf("GET %s… (%d bytes asked): the error is %d bytes", u[:20], len(u), len(body))
		}
		if !strings.Contains(body, "7000 bytes") && !strings.Contains(body, "7001 bytes") {
			t.Errorf("GET %s…: the error does not say how long the value was: %.300s", u[:20], body)
		}
	}
	code, body := httpGet(t, n.httpc, n.base+"/v1/ids?generator="+strings.Repeat("g", 100_000))
	var eb httpErrorBody
	if code != 414 || json.Unmarshal([]byte(body), &eb) != nil || !strings.Contains(eb.Error.Message, "at most 8192") || len(body) > 1000 {
		t.Errorf("a 100 kB request target: %d %.300s, want a short 414 in the JSON error shape", code, body)
	}
}

// TestHTTPFallbackJSON: what no route answers — an unknown path, a method
// a path does not take, a path that is not clean — is answered in the
// API's JSON error shape, never plain text nor a redirect.
func TestHTTPFallbackJSON(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nope", 404, "NOT_FOUND"},
		{"GET", "/v1/ids/", 404, "NOT_FOUND"},
		{"GET", "/v1/decode/", 404, "NOT_FOUND"},
		{"GET", "//v1/ids", 404, "NOT_FOUND"},
		{"GET", "/v1/../v1/ids", 404, "NOT_FOUND"},
		{"POST", "/v1/ids", 405, "UNIMPLEMENTED"},
		{"DELETE", "/v1/ids", 405, "UNIMPLEMENTED"},
		{"PUT", "/readyz", 405, "UNIMPLEMENTED"},
		{"GET", "/admin/resume", 405, "UNIMPLEMENTED"},
		{"POST", "/", 405, "UNIMPLEMENTED"},
		{"OPTIONS", "/metrics", 405, "UNIMPLEMENTED"},
	} {
		req, err := http.NewRequest(c.method, n.base+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = c.path // sent as written, not cleaned by the client
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb httpErrorBody
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode != c.status || ct != "application/json" || json.Unmarshal(body, &eb) != nil || eb.Error.Code != c.code || eb.Error.Message == "" {
			t.Errorf("%s %s: %d %s %q, want %d in the JSON error shape with code %s", c.method, c.path, resp.StatusCode, ct, body, c.status, c.code)
		}
		if c.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
}

// TestHTTPIdleConnectionClosed: a keep-alive connection idle past
// --http-idle-timeout is closed by the node.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.HTTPIdleTimeout = 300 * time.Millisecond })
	waitServing(t, n.ids, "", 10*time.Second)
	conn, err := net.Dial("tcp", n.node.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", n.node.HTTPAddr())
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("GET /healthz: %s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v after %v, want EOF (closed by the node)", err, time.Since(start).Round(time.Millisecond))
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("idle connection closed after %v, want about 300ms", el)
	}
}

// TestHTTPClientRateByHost: --client-rate keys an HTTP caller by its host,
// so a new connection per request does not escape it.
func TestHTTPClientRateByHost(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.ClientRate, c.ClientBurst = 10, 100 })
	waitServing(t, n.ids, "", 10*time.Second)
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if code, body := httpGet(t, fresh, n.base+"/v1/ids?count=100"); code != 200 {
		t.Fatalf("first 100 IDs: %d %s", code, body)
	}
	code, body := httpGet(t, fresh, n.base+"/v1/ids?count=100")
	if code != 429 || !strings.Contains(body, "client-rate") {
		t.Fatalf("100 more at once on a new connection: %d %s, want 429 naming --client-rate", code, body)
	}
}

// TestAdminResumeEdges: POST /admin/resume refuses web pages (an Origin,
// a Host that is not loopback), resumes only the generator named in the
// query or the body, says which were not held, and logs only a resume
// that ended a hold.
func TestAdminResumeEdges(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "msg=snowflake"), faultInjection,
		func(c *core.Config) { c.RollbackRecovery = "manual" })
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "msg", 10*time.Second)
	resume := func(query, body string, header map[string]string, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", n.base+"/admin/resume"+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := n.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Nothing held: nothing resumed, nothing logged.
	if code, body := resume("", "", nil, ""); code != 200 || !strings.Contains(body, `"resumed":[]`) || !strings.Contains(body, `"not_held":["default","msg"]`) {
		t.Fatalf("resume with nothing held: %d %s", code, body)
	}
	if strings.Contains(n.logs.String(), "resumed by operator") {
		t.Fatalf("logged a resume with nothing held:\n%s", n.logs)
	}

	// Both generators held after a rollback, the clock back.
	for _, g := range []string{"default", "msg"} {
		if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: g}); err != nil {
			t.Fatal(err)
		}
	}
	n.setOffset(t, -5*time.Second)
	waitNotServing(t, n.ids, "default", 5*time.Second)
	waitNotServing(t, n.ids, "msg", 5*time.Second)
	n.setOffset(t, 0)
	time.Sleep(700 * time.Millisecond)

	for _, c := range []struct {
		name   string
		header map[string]string
		host   string
	}{
		{"Origin", map[string]string{"Origin": "http://evil.example"}, ""},
		{"Origin null", map[string]string{"Origin": "null"}, ""},
		{"rebound Host", nil, "evil.example:" + portOf(t, n.node.HTTPAddr())},
	} {
		if code, body := resume("", "", c.header, c.host); code != 403 {
			t.Fatalf("resume from a web page (%s): %d %s, want 403", c.name, code, body)
		}
	}
	waitNotServing(t, n.ids, "default", time.Second)

	// The body names msg: msg alone resumes.
	if code, body := resume("", "generator=msg", nil, ""); code != 200 || !strings.Contains(body, `"resumed":["msg"]`) {
		t.Fatalf("resume generator=msg in the body: %d %s", code, body)
	}
	waitServing(t, n.ids, "msg", 3*time.Second)
	waitNotServing(t, n.ids, "default", time.Second)
	// Readiness per generator: msg serves, default is held.
	for _, c := range []struct {
		query string
		code  int
		body  string
	}{
		{"", 503, `"generator":"default"`},
		{"?generator=default", 503, `"generator":"default"`},
		{"?generator=msg", 200, `"generator":"msg"`},
		{"?generator=", 503, `"generator":"default"`},
		{"?generator=nope", 404, `NOT_FOUND`},
		{"?name=msg", 400, `name`},
	} {
		resp, err := n.httpc.Get(n.base + "/readyz" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.body) {
			t.Fatalf("GET /readyz%s with msg serving and default held: %d %s, want %d with %s", c.query, resp.StatusCode, b, c.code, c.body)
		}
	}
	if code, body := resume("?generator=msg", "generator=msg", nil, ""); code != 400 {
		t.Fatalf("generator in the query and the body: %d %s, want 400", code, body)
	}
	// localhost is the listener's host too.
	if code, body := resume("", "", nil, "localhost:"+portOf(t, n.node.HTTPAddr())); code != 200 || !strings.Contains(body, `"resumed":["default"]`) || !strings.Contains(body, `"not_held":["msg"]`) {
		t.Fatalf("resume every generator: %d %s, want default resumed and msg not held", code, body)
	}
	waitServing(t, n.ids, "default", 3*time.Second)
	if got := strings.Count(n.logs.String(), "resumed by operator"); got != 2 {
		t.Fatalf("%d resume log lines, want 2 (msg, then default):\n%s", got, n.logs)
	}
	// An IPv6 loopback literal without a port is a loopback Host too.
	if code, body := resume("", "", nil, "[::1]"); code != 200 || !strings.Contains(body, `"not_held":["default","msg"]`) {
		t.Fatalf("resume with Host [::1]: %d %s, want 200", code, body)
	}
}

// TestLocalOnlyHostRule: the rule that keeps a loopback listener's
// answers from web pages (server.LocalOnly: the profiler, the fault
// listener; /admin/resume without mTLS) accepts exactly a loopback
// address or localhost as Host, with or without a port, an IPv6 literal
// in brackets included, and refuses an Origin: a page that rebinds its
// own name to 127.0.0.1 sends its own name, and reads what a GET answers.
func TestLocalOnlyHostRule(t *testing.T) {
	h := server.LocalOnly("the test listener", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	for _, c := range []struct {
		host, origin string
		code         int
	}{
		{"127.0.0.1", "", 200},
		{"127.0.0.1:6060", "", 200},
		{"127.1.2.3:6060", "", 200},
		{"localhost", "", 200},
		{"localhost:6060", "", 200},
		{"[::1]", "", 200},
		{"[::1]:6060", "", 200},
		{"rebound.evil.example", "", 403},
		{"rebound.evil.example:6060", "", 403},
		{"127.0.0.1.evil.example", "", 403},
		{"localhost.evil.example:6060", "", 403},
		{"[::1].evil.example", "", 403},
		{"[fe80::1]", "", 403},
		{"10.0.0.1:6060", "", 403},
		{"", "", 403},
		{"127.0.0.1:6060", "http://evil.example", 403},
		{"localhost", "null", 403},
	} {
		req := httptest.NewRequest("GET", "/debug/pprof/cmdline", nil)
		req.Host = c.host
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != c.code {
			t.Errorf("Host %q Origin %q: %d %s, want %d", c.host, c.origin, w.Code, w.Body, c.code)
		}
		if w.Code == 403 && !strings.Contains(w.Body.String(), "the test listener") {
			t.Errorf("Host %q Origin %q: refusal %s does not name the listener", c.host, c.origin, w.Body)
		}
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestHTTPHeadOnAGeneratorNotServing: HEAD /v1/ids and /v1/ranges answer
// as GET would, the generator's serving state included: on a generator
// held out (a clock stepped back 5 s, CLOCK_ROLLBACK) both are 503 with a
// Retry-After, and HEAD takes no ID. HEAD answering 200 there would tell
// a caller probing before it asks that a generator serves which refuses.
func TestHTTPHeadOnAGeneratorNotServing(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection)
	waitServing(t, n.ids, "", 15*time.Second)
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 10}); err != nil {
		t.Fatal(err)
	}
	n.setOffset(t, -5*time.Second)
	waitNotServing(t, n.ids, "", 10*time.Second)
	for _, path := range []string{"/v1/ids", "/v1/ranges?count=10"} {
		do := func(method string) *http.Response {
			req, _ := http.NewRequest(method, n.base+path, nil)
			resp, err := n.httpc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		get, head := do("GET"), do("HEAD")
		if get.StatusCode != 503 || head.StatusCode != get.StatusCode || head.Header.Get("Retry-After") == "" || get.Header.Get("Retry-After") == "" {
			t.Errorf("%s on a generator not serving: GET %d (Retry-After %q), HEAD %d (Retry-After %q); want both 503 with Retry-After",
				path, get.StatusCode, get.Header.Get("Retry-After"), head.StatusCode, head.Header.Get("Retry-After"))
		}
	}
}

// TestAdminResumeAllSkipsRetired: POST /admin/resume of every generator
// skips a retired one — it stays in the node's list, draining for good,
// and has no hold to end — and lists it under "retired": resuming it
// fails (NOT_FOUND, retired), which made every resume of all a 400
// "resume refused" though nothing was held and nothing failed. Named, a
// retired generator is still 404.
func TestAdminResumeAllSkipsRetired(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 15*time.Second)
	defs := n.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !listed(t, n.ids, "msg"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("msg not started")
		}
	}
	waitServing(t, n.ids, "msg", 10*time.Second)
	resume := func(query string) (int, string) {
		resp, err := n.httpc.Post(n.base+"/admin/resume"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if _, err := defs.RetireDefinition(ctx(t), "msg", "moved to msg2", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitNotServing(t, n.ids, "msg", 10*time.Second)
	if code, body := resume(""); code != 200 || body != `{"not_held":["default"],"resumed":[],"retired":["msg"]}` {
		t.Errorf("resume of every generator, msg retired: %d %s; want 200 with default not held and msg retired", code, body)
	}
	if code, body := resume("?generator=msg"); code != 404 {
		t.Errorf("resume of msg, retired: %d %s; want 404", code, body)
	}
}

// TestHTTPSeqStrict: POST /v1/seq is parsed as strictly as a query: a
// query parameter (the request is in the body; a generator or count there
// was dropped, and the call served the default generator, or one value),
// a field given twice in the body (encoding/json keeps the last, matching
// names without regard to case), or a second object after the first is
// refused 400 naming it — never dropped, which would hand out values of
// another sequence or another count.
func TestHTTPSeqStrict(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	// chats (a sequence generator) is the node's default.
	n := startNode(t, e.Endpoints, t.TempDir(), seqGen("chats", "seq,sections=4"), seqGen("inbox", "seq,sections=4"),
		func(c *core.Config) { c.Generators = c.Generators[1:] })
	waitServing(t, n.ids, "chats", 20*time.Second)
	waitServing(t, n.ids, "inbox", 20*time.Second)
	post := func(target, body string) (int, httpErrorBody) {
		req, _ := http.NewRequest("POST", n.base+target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := n.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb httpErrorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		return resp.StatusCode, eb
	}
	for _, c := range []struct{ target, body, field string }{
		{"/v1/seq?generator=inbox", `{"key":"k"}`, "generator"},
		{"/v1/seq?count=5", `{"generator":"inbox","key":"k"}`, "count"},
		{"/v1/seq?bogus=1", `{"generator":"inbox","key":"k"}`, "bogus"},
		{"/v1/seq", `{"generator":"inbox","generator":"chats","key":"k"}`, "generator"},
		{"/v1/seq", `{"generator":"inbox","key":"k","Generator":"chats"}`, "Generator"},
		{"/v1/seq", `{"generator":"inbox","key_base64":"aw==","key_baſe64":"bA=="}`, "key_baſe64"},
		{"/v1/seq", `{"generator":"inbox","key":"k"}{"generator":"chats","key":"k"}`, "body"},
		{"/v1/seq", `{"generator":"inbox","key":"k"} x`, "body"},
	} {
		code, eb := post(c.target, c.body)
		if code != 400 || eb.Error.Reason != "BAD_REQUEST" || eb.Error.Metadata["field"] != c.field {
			t.Errorf("POST %s %s: %d %+v; want 400 BAD_REQUEST naming field %q", c.target, c.body, code, eb.Error, c.field)
		}
	}
	// One object, white space after it: served.
	if code, eb := post("/v1/seq", "{\"generator\":\"inbox\",\"key\":\"k\",\"count\":2}\n\n"); code != 200 {
		t.Errorf("POST /v1/seq, one object and a newline: %d %+v", code, eb.Error)
	}
}

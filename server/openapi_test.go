package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/ntptest"
	"github.com/firnid/firn/seq/sections"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// openAPIFile is the HTTP API's description.
const openAPIFile = "../docs/openapi.yaml"

// Every path and response docs/openapi.yaml documents is produced by a
// running node, with the documented content type and a body that fits the
// documented schema; and every response the test produces is documented.
func TestOpenAPIDocumentMatchesTheNode(t *testing.T) {
	raw, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.") {
		t.Fatalf("%s: openapi %q, want 3.x", openAPIFile, v)
	}
	// "GET /v1/ids 200" → response object; "ANY * 405" for the fallback's.
	documented := map[string]map[string]any{}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			for code, resp := range op.(map[string]any)["responses"].(map[string]any) {
				documented[strings.ToUpper(method)+" "+path+" "+code] = resp.(map[string]any)
			}
		}
	}
	fallback, _ := doc["x-firn-fallback"].(map[string]any)
	for code, resp := range fallback["responses"].(map[string]any) {
		documented["ANY * "+code] = resp.(map[string]any)
	}

	// A serving node; one that never serves (its NTP server is 2 s off);
	// one with mTLS and fault injection, for the admin endpoint.
	e := etcdtest.StartEmbedded(t)
	// --client-rate 1/s with bursts of 5 on the serving node: 3 IDs, then
	// 5 at once is 429.
	// Both it and seq2 serve a sequence generator: each owns some of its
	// sections.
	seqOpt := seqGen("chats", "seq,sections=8")
	serving := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.ClientRate, c.ClientBurst = 1, 5 }, seqOpt)
	seq2 := startNamedNode(t, "seq2", e.Endpoints, t.TempDir(), seqOpt)
	ntp := ntptest.NewServer(t)
	ntp.SetOffset(2 * time.Second)
	out := startNamedNode(t, "out", e.Endpoints, t.TempDir(), ntpServers(time.Second, ntp.Addr()))
	certs := etcdtest.MakeCerts(t, "firn-operator")
	mtls := startNamedNode(t, "mtls", e.Endpoints, t.TempDir(), serveTLS(t, certs, true), faultInjection,
		func(c *core.Config) { c.AdminNames = []string{"firn-operator"} }, seqOpt)
	waitServing(t, serving.ids, "", 10*time.Second)
	waitServing(t, serving.ids, "chats", 20*time.Second)
	waitServing(t, seq2.ids, "chats", 20*time.Second)
	good, anon := httpsClient(certs.ClientTLS(t)), httpsClient(roots(t, certs))
	mbase := "https://" + mtls.node.HTTPAddr()
	get := func(c *http.Client, u string) func() (*http.Response, error) {
		return func() (*http.Response, error) { return c.Get(u) }
	}
	postTo := func(c *http.Client, u string) func() (*http.Response, error) {
		return func() (*http.Response, error) { return c.Post(u, "application/x-www-form-urlencoded", nil) }
	}
	a, b := serving.base, out.base
	// 499, 500 and 504 come from the handlers' error path: no request
	// to a sound node provokes them at will.
	errorPath := func(err error) func() (*http.Response, error) {
		return func() (*http.Response, error) {
			rec := httptest.NewRecorder()
			server.WriteHTTPError(rec, err)
			return rec.Result(), nil
		}
	}
	do := func(method, u string, header http.Header) func() (*http.Response, error) {
		return func() (*http.Response, error) {
			req, err := http.NewRequest(method, u, nil)
			if err != nil {
				return nil, err
			}
			maps.Copy(req.Header, header)
			return serving.httpc.Do(req)
		}
	}
	seqPost := func(c *http.Client, base, body string) func() (*http.Response, error) {
		return func() (*http.Response, error) {
			return c.Post(base+"/v1/seq", "application/json", strings.NewReader(body))
		}
	}
	// seqOwnedBy posts keys until one is answered with status want (200:
	// a key of the serving node; 409: one of another node), for up to
	// 10 s: the other node owns sections only once the serving one has
	// seen it join (a loaded machine once answered 200 keys before that).
	seqOwnedBy := func(want int) func() (*http.Response, error) {
		return func() (*http.Response, error) {
			deadline := time.Now().Add(10 * time.Second)
			for i := 0; ; i++ {
				r, err := seqPost(serving.httpc, a, fmt.Sprintf(`{"generator":"chats","key":"k%d"}`, i%200))()
				if err != nil || r.StatusCode == want || time.Now().After(deadline) {
					return r, err
				}
				r.Body.Close()
				if i%200 == 199 {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
	}
	probes := []struct {
		key string
		do  func() (*http.Response, error)
	}{
		{"GET /v1/ids 200", get(serving.httpc, a+"/v1/ids?count=3")},
		{"GET /v1/ids 400", get(serving.httpc, a+"/v1/ids?count=0")},
		{"GET /v1/ids 403", get(anon, mbase+"/v1/ids")},
		{"GET /v1/ids 404", get(serving.httpc, a+"/v1/ids?generator=nope")},
		{"GET /v1/ids 429", get(serving.httpc, a+"/v1/ids?count=5")}, // 3 of the 5 taken just before
		{"GET /v1/ids 503", get(out.httpc, b+"/v1/ids")},
		{"GET /v1/ids 499", errorPath(context.Canceled)},
		{"GET /v1/ids 500", errorPath(status.Error(codes.Internal, "a fault"))},
		{"GET /v1/ids 504", errorPath(context.DeadlineExceeded)},
		{"GET /v1/ranges 200", get(seq2.httpc, seq2.base+"/v1/ranges?count=5000")},
		{"GET /v1/ranges 400", get(seq2.httpc, seq2.base+"/v1/ranges?count=0")},
		{"GET /v1/ranges 403", get(anon, mbase+"/v1/ranges")},
		{"GET /v1/ranges 404", get(seq2.httpc, seq2.base+"/v1/ranges?generator=nope")},
		{"GET /v1/ranges 429", get(serving.httpc, a+"/v1/ranges?count=5")}, // the client rate spent by /v1/ids just before
		{"GET /v1/ranges 503", get(out.httpc, b+"/v1/ranges")},
		{"GET /v1/ranges 499", errorPath(context.Canceled)},
		{"GET /v1/ranges 500", errorPath(status.Error(codes.Internal, "a fault"))},
		{"GET /v1/ranges 504", errorPath(context.DeadlineExceeded)},
		{"ANY * 404", get(serving.httpc, a+"/nope")},
		{"ANY * 405", do(http.MethodPost, a+"/v1/ids", nil)},
		{"ANY * 414", get(serving.httpc, a+"/v1/ids?generator="+strings.Repeat("g", 9<<10))},
		{"ANY * 431", do(http.MethodGet, a+"/healthz", http.Header{"X-Big": {strings.Repeat("h", 2<<20)}})},
		{"POST /v1/seq 200", seqOwnedBy(200)},
		{"POST /v1/seq 409", seqOwnedBy(409)},
		{"POST /v1/seq 400", seqPost(serving.httpc, a, `{"generator":"chats","key":""}`)},
		{"POST /v1/seq 403", seqPost(anon, mbase, `{"generator":"chats","key":"k"}`)},
		{"POST /v1/seq 404", seqPost(serving.httpc, a, `{"generator":"nope","key":"k"}`)},
		{"POST /v1/seq 503", errorPath(&sections.MovingError{Generator: "chats", Section: 3, Why: "its take settles", RetryAfter: time.Second})},
		{"POST /v1/seq 499", errorPath(context.Canceled)},
		{"POST /v1/seq 500", errorPath(status.Error(codes.Internal, "a fault"))},
		{"POST /v1/seq 504", errorPath(context.DeadlineExceeded)},
		{"GET /v1/decode/{id} 200", get(serving.httpc, a+"/v1/decode/2127862948218011648")},
		{"GET /v1/decode/{id} 400", get(serving.httpc, a+"/v1/decode/abc")},
		{"GET /v1/decode/{id} 404", get(serving.httpc, a+"/v1/decode/1?generator=nope")},
		{"GET /readyz 200", get(serving.httpc, a+"/readyz")},
		{"GET /readyz 503", get(out.httpc, b+"/readyz")},
		{"GET /readyz 400", get(serving.httpc, a+"/readyz?generatr=chats")},
		{"GET /readyz 404", get(serving.httpc, a+"/readyz?generator=nope")},
		{"GET /healthz 200", get(serving.httpc, a+"/healthz")},
		{"GET /metrics 200", get(serving.httpc, a+"/metrics")},
		{"GET / 200", get(serving.httpc, a+"/")},
		{"POST /admin/resume 403", postTo(anon, mbase+"/admin/resume")},
		{"POST /admin/resume 404", postTo(good, mbase+"/admin/resume?generator=nope")},
		{"POST /admin/resume 200", postTo(good, mbase+"/admin/resume")},
		{"POST /admin/resume 400", func() (*http.Response, error) {
			// The clock 5 s behind the node's last ID: not resumed.
			waitServingHTTP(t, good, mbase)
			r, err := good.Get(mbase + "/v1/ids?count=10")
			if err != nil {
				return nil, err
			}
			r.Body.Close()
			mtls.setOffset(t, -5*time.Second)
			defer mtls.setOffset(t, 0)
			return good.Post(mbase+"/admin/resume", "application/x-www-form-urlencoded", nil)
		}},
	}
	var tried []string
	for _, p := range probes {
		tried = append(tried, p.key)
		t.Run(p.key, func(t *testing.T) {
			respDoc, ok := documented[p.key]
			if !ok {
				t.Fatalf("%s is not in %s", p.key, openAPIFile)
			}
			resp, err := p.do()
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			want, _ := strconv.Atoi(p.key[strings.LastIndexByte(p.key, ' ')+1:])
			if resp.StatusCode != want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, want)
			}
			ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			content, _ := respDoc["content"].(map[string]any)
			media, ok := content[ct].(map[string]any)
			if !ok {
				t.Fatalf("content type %q is not documented (documented: %v)", ct, keys(content))
			}
			if ct != "application/json" {
				return
			}
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("body %q is not JSON: %v", body, err)
			}
			if err := validate(doc, media["schema"].(map[string]any), v, "body"); err != nil {
				t.Fatalf("%v\nbody: %s", err, body)
			}
		})
	}
	t.Run("every method on every path", func(t *testing.T) {
		everyAnswerDocumented(t, doc, documented, serving.httpc, a)
	})
	var missing []string
	for k := range documented {
		if !slices.Contains(tried, k) {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented but never produced by the test: %v", missing)
	}
}

// everyAnswerDocumented sends every method to every documented path (an
// {id} filled in) and to paths outside them, and checks that each answer's
// status is documented for the path and method (HEAD as GET) or in the
// fallback, and that each error body (but HEAD's, which has none) is in
// the Error shape.
func everyAnswerDocumented(t *testing.T, doc map[string]any, documented map[string]map[string]any, c *http.Client, base string) {
	type target struct{ template, path string }
	var targets []target
	for p := range doc["paths"].(map[string]any) {
		targets = append(targets, target{p, strings.ReplaceAll(p, "{id}", "2127862948218011648")})
	}
	for _, p := range []string{"/nope", "//v1/ids", "/v1/ids/", "/v1/decode/", "/admin", "/v1/ids/../readyz", "/readyz/x", "/V1/IDS"} {
		targets = append(targets, target{"", p})
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].path < targets[j].path })
	errSchema := map[string]any{"$ref": "#/components/schemas/Error"}
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
	answers := 0
	for _, tg := range targets {
		for _, m := range methods {
			req, err := http.NewRequest(m, base+tg.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", m, tg.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers++
			code := strconv.Itoa(resp.StatusCode)
			asked := m
			if m == http.MethodHead {
				asked = http.MethodGet
			}
			_, ok := documented[asked+" "+tg.template+" "+code]
			if !ok {
				_, ok = documented["ANY * "+code]
			}
			if !ok {
				t.Errorf("%s %s answered %d, documented neither for the path nor in x-firn-fallback: %s", m, tg.path, resp.StatusCode, body)
				continue
			}
			if resp.StatusCode < 400 || m == http.MethodHead {
				continue
			}
			if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
				t.Errorf("%s %s: %d with content type %q, want the JSON Error shape", m, tg.path, resp.StatusCode, ct)
				continue
			}
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Errorf("%s %s: %d body %q is not JSON", m, tg.path, resp.StatusCode, body)
				continue
			}
			if err := validate(doc, errSchema, v, "body"); err != nil {
				t.Errorf("%s %s: %d: %v\nbody: %s", m, tg.path, resp.StatusCode, err, body)
			}
		}
	}
	t.Logf("%d answers (%d paths × %d methods), each documented", answers, len(targets), len(methods))
}

// waitServingHTTP waits until the node's /readyz says 200.
func waitServingHTTP(t *testing.T, c *http.Client, base string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if code, _ := httpGet(t, c, base+"/readyz"); code == 200 {
			return
		}
	}
	t.Fatalf("%s not ready within 10 s", base)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validate checks v against the subset of OpenAPI 3.0 schemas the document
// uses: $ref, type, required, properties, items, additionalProperties,
// enum and pattern.
func validate(doc, schema map[string]any, v any, at string) error {
	if ref, ok := schema["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		s, ok := doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: unresolved $ref %s", at, ref)
		}
		return validate(doc, s, v, at)
	}
	switch schema["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", at, v)
		}
		for _, r := range asList(schema["required"]) {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("%s: required %q missing", at, r)
			}
		}
		props, _ := schema["properties"].(map[string]any)
		for k, val := range m {
			if ps, ok := props[k].(map[string]any); ok {
				if err := validate(doc, ps, val, at+"."+k); err != nil {
					return err
				}
			} else if ap, ok := schema["additionalProperties"].(map[string]any); ok {
				if err := validate(doc, ap, val, at+"."+k); err != nil {
					return err
				}
			} else {
				return fmt.Errorf("%s: property %q is not documented", at, k)
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", at, v)
		}
		items, _ := schema["items"].(map[string]any)
		for i, e := range l {
			if err := validate(doc, items, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %v is not a string", at, v)
		}
		if p, ok := schema["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(s) {
			return fmt.Errorf("%s: %q does not match %s", at, s, p)
		}
		if schema["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return fmt.Errorf("%s: %q is not a date-time", at, s)
			}
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Errorf("%s: %v is not an integer", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", at, v)
		}
	}
	if enum := asList(schema["enum"]); len(enum) > 0 && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

package server

// The HTTP API: GET /v1/ids, GET /v1/ranges, GET /v1/decode/{id}, /metrics, /healthz,
// /readyz and POST /admin/resume, on the HTTP listener (with the status
// page, statuspage.go). The fault endpoint has a listener of its own
// (fault.go).

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/core"
)

// httpTLS is the HTTP listener's TLS configuration: like gRPC's, except
// that with mTLS a client certificate is verified when given but not
// required at the handshake, so that probes and scrapes (/healthz,
// /readyz, /metrics, the status page) work without one; the ID API and
// /admin require a verified certificate (requireClientCert).
func httpTLS(c *tls.Config) *tls.Config {
	if c == nil || c.ClientAuth != tls.RequireAndVerifyClientCert {
		return c
	}
	h := c.Clone()
	h.ClientAuth = tls.VerifyClientCertIfGiven
	if get := c.GetConfigForClient; get != nil {
		// A per-handshake configuration (a reloaded client CA) keeps the
		// HTTP listener's rule.
		h.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(hello)
			if err != nil || cc == nil {
				return cc, err
			}
			cc = cc.Clone()
			cc.ClientAuth = tls.VerifyClientCertIfGiven
			return cc, nil
		}
	}
	return h
}

// requireClientCert refuses a request without a verified client
// certificate when mTLS is on.
func (n *Node) requireClientCert(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.MutualTLS() && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeDenied(w, "this endpoint needs a client certificate signed by --tls-client-ca")
			return
		}
		h(w, r)
	}
}

func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	routes := map[string]http.Handler{
		"GET /v1/ids":         n.requireClientCert(n.handleIDs),
		"GET /v1/ranges":      n.requireClientCert(n.handleRanges),
		"GET /v1/decode/{id}": n.requireClientCert(n.handleDecode),
		"POST /v1/seq":        n.requireClientCert(n.handleSeq),
		"GET /metrics":        promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg}),
		"GET /healthz": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, "ok")
		}),
		"GET /readyz":        http.HandlerFunc(n.handleReady),
		"POST /admin/resume": http.HandlerFunc(n.handleResume),
		"GET /{$}":           http.HandlerFunc(n.handleStatus),
	}
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	return apiFallback(mux, routes)
}

// maxRequestURI is the longest request target the HTTP listener takes
// (the API's are a few dozen bytes); a longer one is 414. Beyond the
// server's MaxHeaderBytes (1 MiB) net/http itself answers 431, in plain
// text, before any handler runs.
const maxRequestURI = 8 << 10

// apiFallback answers in the API's JSON error shape what the mux would
// answer on its own: a path no route has (404), a method the path does
// not take (405, with Allow), a path that is not clean (404 naming the
// clean one, instead of the mux's redirect: a redirected POST or ID
// request is not what the caller sent), and a request target longer than
// maxRequestURI (414).
func apiFallback(mux *http.ServeMux, routes map[string]http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.RequestURI) > maxRequestURI {
			writeJSON(w, http.StatusRequestURITooLong, httpError{Error: httpErrorBody{Code: codeName(codes.InvalidArgument),
				Message: fmt.Sprintf("request target of %d bytes: at most %d", len(r.RequestURI), maxRequestURI)}})
			return
		}
		path := core.Echo(r.URL.Path)
		if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
			writeJSON(w, http.StatusNotFound, httpError{Error: httpErrorBody{Code: codeName(codes.NotFound),
				Message: fmt.Sprintf("no path %s: did you mean %s?", path, core.Echo(clean))}})
			return
		}
		if _, pattern := mux.Handler(r); routes[pattern] != nil {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeJSON(w, rec.status, httpError{Error: httpErrorBody{Code: codeName(codes.Unimplemented),
				Message: fmt.Sprintf("%s %s: this path takes %s", core.Echo(r.Method), path, allow)}})
		case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			writeJSON(w, http.StatusNotFound, httpError{Error: httpErrorBody{Code: codeName(codes.NotFound),
				Message: fmt.Sprintf("no path %s: did you mean %s?", path, core.Echo(rec.header.Get("Location")))}})
		default:
			writeJSON(w, http.StatusNotFound, httpError{Error: httpErrorBody{Code: codeName(codes.NotFound),
				Message: fmt.Sprintf("no path %s (the API: GET /v1/ids, GET /v1/ranges, GET /v1/decode/{id}, POST /v1/seq, GET /readyz, GET /healthz, GET /metrics, POST /admin/resume, GET /)", path)}})
		}
	})
}

// cleanPath is p as the mux would redirect it: no "." or ".." elements,
// no repeated slashes, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	c := pathpkg.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// statusRecorder keeps what the mux answers on its own: the status and
// the headers, not the plain-text body.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header { return r.header }

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(p), nil
}

// queryParams are the parameters an endpoint takes, each with whether it
// may be given empty (generator= is the default generator, as absent).
type queryParams map[string]bool

// strictQuery parses a query string strictly: a pair that does not decode
// (a stray "%", a ";"), a parameter the endpoint does not take, a repeated
// one or an empty value where none is allowed is refused as a bad request
// naming it — never dropped, which would turn the request into another
// (another generator, another count). An absent parameter is absent from
// the map.
func strictQuery(raw string, params queryParams) (map[string]string, error) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, core.BadField("query", raw, "", "the query %q does not parse: %v", raw, err)
	}
	known := slices.Sorted(maps.Keys(params))
	out := make(map[string]string, len(vals))
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		v := vals[k]
		emptyOK, ok := params[k]
		switch {
		case !ok && len(known) == 0:
			return nil, core.BadField(k, strings.Join(v, ","), "no query parameters", "unknown parameter %q: this endpoint takes no query parameters", k)
		case !ok:
			return nil, core.BadField(k, strings.Join(v, ","), strings.Join(known, ","), "unknown parameter %q: this endpoint takes %s", k, strings.Join(known, ", "))
		case len(v) > 1:
			return nil, core.BadField(k, strings.Join(v, ","), "once", "parameter %q given %d times: give it once", k, len(v))
		case v[0] == "" && !emptyOK:
			return nil, core.BadField(k, "", "not empty", "parameter %q is empty: give a value or leave it out", k)
		}
		out[k] = v[0]
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeErr answers err as the API's JSON error, with Retry-After when the
// node knows when it will serve again.
func writeErr(w http.ResponseWriter, err error) {
	body, retry := newHTTPError(err)
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, httpStatus(code(err)), body)
}

// writeDenied answers 403 PERMISSION_DENIED with msg, and the reason
// PERMISSION_DENIED: every refusal carries its cause (docs/design.md,
// Errors), this one too.
func writeDenied(w http.ResponseWriter, msg string) {
	writeJSON(w, 403, httpError{Error: httpErrorBody{Code: codeName(codes.PermissionDenied), Reason: string(reasonDenied), Message: msg}})
}

// handleIDs: GET /v1/ids?generator=&count= → {"ids":["…"]}, IDs as
// decimal strings (JavaScript cannot hold 64-bit integers).
//
// HEAD answers what GET would before issuing (the same checks, the same
// headers) and issues nothing.
func (n *Node) handleIDs(w http.ResponseWriter, r *http.Request) {
	gen, count, fctx, ok := n.issueRequest(w, r, func(rt *core.Generator) int64 { return int64(rt.MaxBatch()) },
		func(gen string, count int64) error {
			rt, err := n.core.CheckBatch(gen, count)
			if err != nil {
				return err
			}
			return rt.CheckServing()
		})
	if !ok {
		return
	}
	// The server's own deadline: an HTTP client may have none.
	ctx, cancel := context.WithTimeout(fctx, n.cfg.HTTPRequestTimeout)
	defer cancel()
	ids, err := n.core.IDs(ctx, gen, count)
	if err != nil {
		writeErr(w, err)
		return
	}
	var b strings.Builder
	b.Grow(len(ids)*21 + 16)
	b.WriteString(`{"ids":[`)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strconv.FormatUint(id, 10))
		b.WriteByte('"')
	}
	b.WriteString("]}\n")
	w.Header().Set("Content-Type", "application/json")
	// IDs are single-use: no cache may keep or replay them.
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(b.String()))
}

// issueRequest reads what /v1/ids and /v1/ranges share: the strict query
// (generator, count: default 1), the caller's right to the generator
// (before anything else: a caller it does not serve learns nothing of it,
// not even its bounds), a count that parses (else a bad request naming
// bound's value, after an unknown generator), and HEAD, answered here with
// check's verdict (the request's bounds and the generator's serving
// state: a refusal with its cause and Retry-After, as GET's) and the
// headers GET would send, issuing nothing. ok is
// false when it has answered; ctx carries the caller's identity.
func (n *Node) issueRequest(w http.ResponseWriter, r *http.Request, bound func(*core.Generator) int64,
	check func(gen string, count int64) error) (gen string, count int64, ctx context.Context, ok bool) {
	q, err := strictQuery(r.URL.RawQuery, queryParams{"generator": true, "count": false})
	if err != nil {
		writeErr(w, err)
		return "", 0, nil, false
	}
	gen, count = q["generator"], 1
	ctx = admission.WithHTTPFlowKey(r.Context(), r)
	if err := n.core.Authorize(ctx, gen); err != nil {
		writeErr(w, err)
		return "", 0, nil, false
	}
	if s, given := q["count"]; given {
		if count, err = strconv.ParseInt(s, 10, 64); err != nil || count < 0 {
			rt, err := n.core.Lookup(gen)
			if err == nil {
				err = core.BadField("count", s, fmt.Sprintf("[1, %d]", bound(rt)), "count %q is not an integer in [1, %d]", s, bound(rt))
			}
			writeErr(w, err)
			return "", 0, nil, false
		}
	}
	if r.Method == http.MethodHead {
		if err := check(gen, count); err != nil {
			writeErr(w, err)
			return "", 0, nil, false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		return "", 0, nil, false
	}
	return gen, count, ctx, true
}

// handleRanges is NextRange over HTTP: count IDs of the generator as
// runs of consecutive IDs, {"runs":[{"first":"…","count":N},…]} in
// increasing order, first as a decimal string (IDs pass 2^53).
func (n *Node) handleRanges(w http.ResponseWriter, r *http.Request) {
	gen, count, fctx, ok := n.issueRequest(w, r, func(rt *core.Generator) int64 { return int64(min(rt.MaxRange(), math.MaxInt64)) },
		func(gen string, count int64) error {
			rt, err := n.core.CheckRange(gen, uint64(count))
			if err != nil {
				return err
			}
			return rt.CheckServing()
		})
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(fctx, n.cfg.HTTPRequestTimeout)
	defer cancel()
	runs, err := n.core.NextRange(ctx, gen, uint64(count))
	if err != nil {
		writeErr(w, err)
		return
	}
	var b strings.Builder
	b.Grow(len(runs)*48 + 16)
	b.WriteString(`{"runs":[`)
	for i, run := range runs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"first":"`)
		b.WriteString(strconv.FormatUint(run.First, 10))
		b.WriteString(`","count":`)
		b.WriteString(strconv.FormatUint(run.Count, 10))
		b.WriteByte('}')
	}
	b.WriteString("]}\n")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(b.String()))
}

type decodeJSON struct {
	ID         string    `json:"id"`
	Generator  string    `json:"generator"`
	Time       time.Time `json:"time"`
	Datacenter uint64    `json:"datacenter"`
	Worker     uint64    `json:"worker"`
	Sequence   uint64    `json:"sequence"`
}

func (n *Node) handleDecode(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r.URL.RawQuery, queryParams{"generator": true})
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := n.core.Authorize(admission.WithHTTPFlowKey(r.Context(), r), q["generator"]); err != nil {
		writeErr(w, err)
		return
	}
	rt, err := n.core.Lookup(q["generator"])
	if err != nil {
		writeErr(w, err)
		return
	}
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		writeErr(w, core.BadField("id", s, "[0, 2^64)", "id %q is not a decimal 64-bit unsigned integer", s))
		return
	}
	p, err := rt.Decode(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, decodeJSON{ID: s, Generator: rt.Name(), Time: p.Time.UTC(), Datacenter: p.Datacenter, Worker: p.Worker, Sequence: p.Sequence})
}

type readyGen struct {
	Name    string `json:"name"`
	Default bool   `json:"default"`
	Serving bool   `json:"serving"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	// Cause is the reason's code (an ErrorReason name); empty while serving.
	Cause string `json:"cause,omitempty"`
}

// handleReady: 200 only while the generator asked for serves — the one
// named by generator= (404 for an unknown name), else the default — so
// that a pod serving several generators can be probed for each; the body
// gives every generator's state, and names the one the answer is for.
func (n *Node) handleReady(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r.URL.RawQuery, queryParams{"generator": true})
	if err != nil {
		writeErr(w, err)
		return
	}
	asked, err := n.core.Find(q["generator"])
	if err != nil {
		writeErr(w, err)
		return
	}
	var out struct {
		Ready      bool       `json:"ready"`
		Generator  string     `json:"generator"`
		Generators []readyGen `json:"generators"`
	}
	for _, rt := range n.core.Generators() {
		out.Generators = append(out.Generators, readyGen{Name: rt.Name(), Default: rt.IsDefault(),
			Serving: rt.State().Serving(), State: rt.State().State().String(), Reason: rt.State().Reason(),
			Cause: string(rt.State().Snapshot().Refusal().Code)})
	}
	out.Generator = asked.Name()
	out.Ready = asked.State().Serving()
	status := 200
	if !out.Ready {
		status = 503
	}
	writeJSON(w, status, out)
}

// adminAllowed says whether r may call an admin endpoint, and if not,
// why (docs/design.md, Interfaces). Over mTLS: a verified client
// certificate whose subject CN or a DNS SAN is in --admin-names (an ID
// caller's certificate is not enough). Without mTLS: only on a loopback
// HTTP listener, where the caller is on the node's host.
func (n *Node) adminAllowed(r *http.Request) (bool, string) {
	if n.cfg.MutualTLS() {
		if len(n.cfg.AdminNames) == 0 {
			return false, "no admin is configured (--admin-names lists the client certificate names allowed)"
		}
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			return false, "needs a client certificate signed by --tls-client-ca whose name is in --admin-names"
		}
		leaf := r.TLS.VerifiedChains[0][0]
		for _, name := range append([]string{leaf.Subject.CommonName}, leaf.DNSNames...) {
			if slices.Contains(n.cfg.AdminNames, name) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("client certificate %q is not in --admin-names", leaf.Subject.CommonName)
	}
	if host, _, err := net.SplitHostPort(n.httpLis.Addr().String()); err == nil && core.LoopbackHost(host) {
		return true, ""
	}
	return false, "admin endpoints need mTLS (--tls-client-ca with --admin-names), or an HTTP listener on loopback"
}

// handleResume ends a manual-recovery stop: every generator held, or the
// one named by generator= in the query or the form body (not both).
// Requests from web pages are refused (browserRefusal); a generator that
// cannot resume does not stop the others, and the answer lists both. Of
// every generator, a retired one (still listed, draining for good) is
// skipped and listed under "retired": it has no hold to end, and would
// otherwise turn every resume of all into a 400.
func (n *Node) handleResume(w http.ResponseWriter, r *http.Request) {
	if ok, why := n.adminAllowed(r); !ok {
		writeDenied(w, "POST /admin/resume: "+why)
		return
	}
	if why := n.browserRefusal(r); why != "" {
		writeDenied(w, "POST /admin/resume: "+why)
		return
	}
	q, err := strictQuery(r.URL.RawQuery, queryParams{"generator": true})
	if err != nil {
		writeErr(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err != nil {
		writeErr(w, core.BadField("body", "", "4096 bytes", "the body: %v", err))
		return
	}
	form, err := strictQuery(string(body), queryParams{"generator": true})
	if err != nil {
		writeErr(w, err)
		return
	}
	gen, inQuery := q["generator"]
	if g, ok := form["generator"]; ok {
		if inQuery {
			writeErr(w, core.BadField("generator", g, "once", "generator given in both the query and the body: give it once"))
			return
		}
		gen = g
	}
	var names []string
	if gen == "" {
		for _, rt := range n.core.Generators() {
			names = append(names, rt.Name())
		}
	} else {
		if _, err := n.core.Find(gen); err != nil {
			writeErr(w, err)
			return
		}
		names = []string{gen}
	}
	resumed, notHeld, retired := []string{}, []string{}, []string{}
	failed := map[string]string{}
	var re *core.RetiredError
	for _, name := range names {
		held, err := n.core.Resume(name)
		switch {
		case err != nil && gen == "" && errors.As(err, &re):
			// Every generator: a retired one stays in the node's list
			// (draining, for good) and has no hold to end. Named, it is
			// NOT_FOUND above.
			retired = append(retired, name)
		case err != nil:
			failed[name] = err.Error()
		case held:
			resumed = append(resumed, name)
		default:
			notHeld = append(notHeld, name)
		}
	}
	client := "local caller " + r.RemoteAddr
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		client = r.TLS.VerifiedChains[0][0].Subject.String()
	}
	if len(resumed) > 0 {
		n.log.Warn("manual recovery: resumed by operator", "generators", resumed, "client", client)
	}
	if len(failed) == 0 {
		answer := map[string]any{"resumed": resumed, "not_held": notHeld}
		if len(retired) > 0 {
			answer["retired"] = retired
		}
		writeJSON(w, 200, answer)
		return
	}
	// Some could not resume (their clock is still behind their last ID):
	// the others were tried all the same, and the answer says which did.
	var why []string
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		why = append(why, name+": "+failed[name])
	}
	n.log.Warn("manual recovery: resume refused", "generators", slices.Sorted(maps.Keys(failed)), "client", client)
	writeErr(w, fmt.Errorf("%w: %s (resumed: %s; not held: %s)", core.ErrBadRequest, strings.Join(why, "; "),
		listOrNone(resumed), listOrNone(notHeld)))
}

// listOrNone is names comma-separated, or "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// browserRefusal says why r looks like a request a web page made, or "":
// it carries an Origin header (browsers send one with every cross-site
// POST, and a plain form POST needs no preflight), or, on the loopback
// listener without mTLS, its Host is not a loopback address or localhost
// (a page that rebound its own name to 127.0.0.1 sends its own name).
// The CLI and curl send neither.
func (n *Node) browserRefusal(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		return fmt.Sprintf("refused for a request from a web page (Origin %q): use curl or the CLI", core.Echo(o))
	}
	if n.cfg.MutualTLS() {
		return ""
	}
	return hostRefusal(r)
}

// hostRefusal says why r's Host is not one a local caller sends (a
// loopback address or localhost, with or without a port), or "".
func hostRefusal(r *http.Request) string {
	if core.LoopbackHostHeader(r.Host) {
		return ""
	}
	return fmt.Sprintf("refused for Host %q: on a listener without mTLS, address the node by a loopback address or localhost", core.Echo(r.Host))
}

// LocalOnly serves h to local callers alone, for a listener held to
// loopback without TLS (the profiler, the fault listener): a request
// carrying an Origin header (a web page's) or a Host that is not a
// loopback address or localhost (a page that rebound its own name to
// 127.0.0.1: it could read what a GET answers, such as the profiler's
// /debug/pprof/cmdline, credentials included) is refused 403, naming
// what refused it. what names the listener in the refusal.
func LocalOnly(what string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" {
			writeDenied(w, fmt.Sprintf("%s refuses requests from web pages (Origin %q): use curl or the CLI", what, core.Echo(o)))
			return
		}
		if !core.LoopbackHostHeader(r.Host) {
			writeDenied(w, fmt.Sprintf("%s refuses Host %q: address it by a loopback address or localhost", what, core.Echo(r.Host)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// seqJSON is POST /v1/seq's body: a key as a string, or as base64 for
// bytes (key_base64), and a count (default 1).
type seqJSON struct {
	Generator string `json:"generator"`
	Key       string `json:"key"`
	KeyBase64 string `json:"key_base64"`
	Count     uint64 `json:"count"`
}

// seqJSONFields are seqJSON's JSON names.
var seqJSONFields = []string{"generator", "key", "key_base64", "count"}

// seqJSONShape is what a bad POST /v1/seq body is told to be.
const seqJSONShape = `one object {"generator","key" or "key_base64","count"}, each field once, at most 4096 bytes`

// decodeSeqJSON reads POST /v1/seq's body: one JSON object of seqJSON's
// fields, each at most once (encoding/json keeps the last of a repeated
// key, matching names without regard to case, so the check matches as
// it does), and nothing after it but white space.
func decodeSeqJSON(body io.Reader) (seqJSON, error) {
	var req seqJSON
	b, err := io.ReadAll(body)
	if err != nil {
		return req, core.BadField("body", "", seqJSONShape, "the body is not a sequence request: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		// A field of the wrong JSON type (a negative, fractional or
		// too large count, a number for a string) is refused naming the
		// field and its bound, as gRPC's count out of bounds is.
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && slices.Contains(seqJSONFields, te.Field) {
			limit, want := "a string", "a string"
			if te.Field == "count" {
				limit = "1.." + strconv.Itoa(seq.MaxCount)
				want = "an integer in " + limit
			}
			return req, core.BadField(te.Field, core.Echo(te.Value), limit, "%s is a JSON %s: give %s", te.Field, core.Echo(te.Value), want)
		}
		return req, core.BadField("body", "", seqJSONShape, "the body is not a sequence request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, core.BadField("body", "", seqJSONShape, "the body holds more after its object, at byte %d: send one request per call", dec.InputOffset())
	}
	// The object decoded: walk its keys for a repeated one.
	dec = json.NewDecoder(bytes.NewReader(b))
	dec.Token() // {
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		k, _ := t.(string)
		field := k
		for _, f := range seqJSONFields {
			if strings.EqualFold(k, f) { // encoding/json's match
				field = f
			}
		}
		if seen[field] {
			return req, core.BadField(core.Echo(k), "", "once", "field %q given twice in the body: give it once", core.Echo(k))
		}
		seen[field] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			break
		}
		if field == "key" && !exactJSONString(skip) {
			// encoding/json reads a lone surrogate or a byte that is not
			// UTF-8 as U+FFFD: two keys of the caller's would share one
			// sequence.
			return req, core.BadField("key", "", "a string of Unicode characters (bytes: key_base64)",
				"key holds a lone UTF-16 surrogate or bytes that are not UTF-8, which JSON cannot carry: send the bytes as key_base64")
		}
	}
	return req, nil
}

// exactJSONString reports whether raw, a JSON value, is a string that
// decodes without replacement: valid UTF-8, and every \u escape of a
// surrogate one of a pair.
func exactJSONString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return true // not a string: the decode refuses it
	}
	b := raw[1 : len(raw)-1]
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(b); {
		if b[i] != '\\' {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			i += size
			continue
		}
		if i+1 < len(b) && b[i+1] != 'u' {
			i += 2
			continue
		}
		r, ok := hex4(i)
		if !ok {
			return true // the decode refuses it
		}
		i += 6
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(i)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// isJSON reports whether a Content-Type names application/json exactly
// (in any case, parameters such as charset allowed): not a type that only
// begins so, such as application/jsonp.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// handleSeq serves POST /v1/seq: {"generator", "key" | "key_base64",
// "count"} → {"first": "N", "last": "M", "count": C} (values as decimal
// strings, exact in any JSON reader). The body must be JSON
// (Content-Type application/json): a web page on another site cannot send
// that without the browser asking first, and the node answers no such
// request. It is parsed as strictly as a query (strictQuery): a query
// parameter (the request is in the body), a field given twice, or
// anything after the body's object is refused naming it — never dropped,
// which would serve another generator or another count.
func (n *Node) handleSeq(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		writeErr(w, core.BadField("Content-Type", core.Echo(ct), "application/json", "POST /v1/seq takes a JSON body (Content-Type: application/json), not %q", core.Echo(ct)))
		return
	}
	if _, err := strictQuery(r.URL.RawQuery, queryParams{}); err != nil {
		writeErr(w, err)
		return
	}
	req, err := decodeSeqJSON(http.MaxBytesReader(w, r.Body, 4096))
	if err != nil {
		writeErr(w, err)
		return
	}
	fctx := admission.WithHTTPFlowKey(r.Context(), r)
	if err := n.core.Authorize(fctx, req.Generator); err != nil {
		writeErr(w, err)
		return
	}
	key := []byte(req.Key)
	switch {
	case req.Key != "" && req.KeyBase64 != "":
		writeErr(w, core.BadField("key", "", "one of key, key_base64", "give the key once: as key (a string) or key_base64 (bytes)"))
		return
	case req.KeyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(req.KeyBase64)
		if err != nil {
			writeErr(w, core.BadField("key_base64", core.Echo(req.KeyBase64), "standard base64", "key_base64 is not base64: %v", err))
			return
		}
		key = b
	}
	count := max(req.Count, 1)
	ctx, cancel := context.WithTimeout(fctx, n.cfg.HTTPRequestTimeout)
	defer cancel()
	first, err := n.core.NextSeq(ctx, req.Generator, key, count)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, "{\"first\":\"%d\",\"last\":\"%d\",\"count\":%d}\n", first, first+count-1, count)
}

package server

// The HTTP API: GET /v1/ids, GET /v1/decode/{id}, /metrics, /healthz,
// /readyz and POST /admin/resume, on the HTTP listener (with the status
// page, statuspage.go). The fault endpoint has a listener of its own
// (fault.go).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
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
	mux.HandleFunc("GET /v1/ids", n.requireClientCert(n.handleIDs))
	mux.HandleFunc("GET /v1/decode/{id}", n.requireClientCert(n.handleDecode))
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", n.handleReady)
	mux.HandleFunc("POST /admin/resume", n.handleResume)
	mux.HandleFunc("GET /{$}", n.handleStatus)
	return mux
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

// writeDenied answers 403 PERMISSION_DENIED with msg.
func writeDenied(w http.ResponseWriter, msg string) {
	writeJSON(w, 403, httpError{Error: httpErrorBody{Code: codeName(codes.PermissionDenied), Message: msg}})
}

// handleIDs: GET /v1/ids?generator=&count= → {"ids":["…"]}, IDs as
// decimal strings (JavaScript cannot hold 64-bit integers).
func (n *Node) handleIDs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rt, err := n.lookup(q.Get("generator"))
	if err != nil {
		writeErr(w, err)
		return
	}
	count := int64(1)
	if s := q.Get("count"); s != "" {
		count, err = strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeErr(w, badField("count", s, fmt.Sprintf("[1, %d]", rt.maxBatch), "count %q is not an integer in [1, %d]", s, rt.maxBatch))
			return
		}
	}
	if err := checkCount(rt, count); err != nil {
		writeErr(w, err)
		return
	}
	// The server's own deadline: an HTTP client may have none.
	ctx, cancel := context.WithTimeout(withFlowKey(r.Context(), r), n.cfg.HTTPRequestTimeout)
	defer cancel()
	ids, err := rt.issueN(ctx, int(count))
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

type decodeJSON struct {
	ID         string    `json:"id"`
	Generator  string    `json:"generator"`
	Time       time.Time `json:"time"`
	Datacenter uint64    `json:"datacenter"`
	Worker     uint64    `json:"worker"`
	Sequence   uint64    `json:"sequence"`
}

func (n *Node) handleDecode(w http.ResponseWriter, r *http.Request) {
	rt, err := n.lookup(r.URL.Query().Get("generator"))
	if err != nil {
		writeErr(w, err)
		return
	}
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		writeErr(w, badField("id", s, "[0, 2^64)", "id %q is not a decimal 64-bit unsigned integer", s))
		return
	}
	p, err := rt.cfg.Layout.Decode(id)
	if err != nil {
		writeErr(w, badField("id", s, "", "%v", err))
		return
	}
	writeJSON(w, 200, decodeJSON{ID: s, Generator: rt.cfg.Name, Time: p.Time.UTC(), Datacenter: p.Datacenter, Worker: p.Worker, Sequence: p.Sequence})
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

// handleReady: 200 only while the default generator serves; the body gives
// each generator's state and reason.
func (n *Node) handleReady(w http.ResponseWriter, r *http.Request) {
	var out struct {
		Ready      bool       `json:"ready"`
		Generators []readyGen `json:"generators"`
	}
	for _, rt := range n.gens {
		out.Generators = append(out.Generators, readyGen{Name: rt.cfg.Name, Default: rt.isDefault,
			Serving: rt.state.Serving(), State: rt.state.State().String(), Reason: rt.state.Reason(),
			Cause: string(rt.state.Snapshot().Refusal().Code)})
	}
	out.Ready = n.gens[0].state.Serving()
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
	if host, _, err := net.SplitHostPort(n.httpLis.Addr().String()); err == nil && LoopbackHost(host) {
		return true, ""
	}
	return false, "admin endpoints need mTLS (--tls-client-ca with --admin-names), or an HTTP listener on loopback"
}

// handleResume ends a manual-recovery stop; only over mTLS, and only for a
// client whose certificate the node verified.
func (n *Node) handleResume(w http.ResponseWriter, r *http.Request) {
	if ok, why := n.adminAllowed(r); !ok {
		writeDenied(w, "POST /admin/resume: "+why)
		return
	}
	gen := r.URL.Query().Get("generator")
	var names []string
	if gen == "" {
		for _, rt := range n.gens {
			names = append(names, rt.cfg.Name)
		}
	} else {
		names = []string{gen}
	}
	for _, name := range names {
		if err := n.Resume(name); err != nil {
			if !errors.Is(err, ErrUnknownGenerator) {
				err = fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
			writeErr(w, err)
			return
		}
	}
	client := "local caller " + r.RemoteAddr
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		client = r.TLS.VerifiedChains[0][0].Subject.String()
	}
	n.log.Warn("manual recovery: resumed by operator", "generators", names, "client", client)
	writeJSON(w, 200, map[string]any{"resumed": names})
}

package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverTLS builds the TLS configuration for gRPC and HTTP, or nil.
func (n *Node) serverTLS() (*tls.Config, error) {
	if n.cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(n.cfg.TLSCert, n.cfg.TLSKey)
	if err != nil {
		return nil, configErr("tls-cert", "%v", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if n.cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(n.cfg.TLSClientCA)
		if err != nil {
			return nil, configErr("tls-client-ca", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configErr("tls-client-ca", "%s holds no PEM certificate", n.cfg.TLSClientCA)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

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
	return h
}

// requireClientCert refuses a request without a verified client
// certificate when mTLS is on.
func (n *Node) requireClientCert(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.TLSClientCA != "" && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeJSON(w, 403, jsonError{Error: "this endpoint needs a client certificate signed by --tls-client-ca", Code: "PermissionDenied"})
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

type jsonError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	c := code(err)
	writeJSON(w, httpStatus(c), jsonError{Error: err.Error(), Code: c.String()})
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
			writeErr(w, badRequest("count %q is not an integer in [1, %d]", s, rt.maxBatch))
			return
		}
	}
	if err := checkCount(rt, count); err != nil {
		writeErr(w, err)
		return
	}
	ids := make([]uint64, count)
	// The server's own deadline: an HTTP client may have none.
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.HTTPRequestTimeout)
	defer cancel()
	if err := rt.issue(ctx, ids); err != nil {
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
		writeErr(w, badRequest("id %q is not a decimal 64-bit unsigned integer", s))
		return
	}
	p, err := rt.cfg.Layout.Decode(id)
	if err != nil {
		writeErr(w, badRequest("%v", err))
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
			Serving: rt.state.Serving(), State: rt.state.State().String(), Reason: rt.state.Reason()})
	}
	out.Ready = n.gens[0].state.Serving()
	status := 200
	if !out.Ready {
		status = 503
	}
	writeJSON(w, status, out)
}

// handleResume ends a manual-recovery stop; only over mTLS, and only for a
// client whose certificate the node verified.
func (n *Node) handleResume(w http.ResponseWriter, r *http.Request) {
	if n.cfg.TLSClientCA == "" || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		writeJSON(w, 403, jsonError{Error: "POST /admin/resume needs mTLS (--tls-client-ca) and a verified client certificate", Code: "PermissionDenied"})
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
	n.log.Warn("manual recovery: resumed by operator", "generators", names, "client", r.TLS.VerifiedChains[0][0].Subject.String())
	writeJSON(w, 200, map[string]any{"resumed": names})
}

// --- fault injection -------------------------------------------------

func (n *Node) faultHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /debug/fault/clock-offset", func(w http.ResponseWriter, r *http.Request) {
		s := r.FormValue("offset")
		d, err := time.ParseDuration(s)
		if err != nil {
			writeJSON(w, 400, jsonError{Error: fmt.Sprintf("offset %q is not a Go duration (e.g. -5s, 300ms, 0)", s), Code: "InvalidArgument"})
			return
		}
		old := n.offset.CurrentOffset()
		n.offset.SetOffset(d)
		n.log.Warn("FAULT INJECTION: clock offset set", "offset", d, "previous", old)
		writeJSON(w, 200, map[string]string{"offset": d.String(), "previous": old.String()})
	})
	mux.HandleFunc("GET /debug/fault/clock-offset", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"offset": n.offset.CurrentOffset().String()})
	})
	return refuseBrowsers(mux)
}

// refuseBrowsers refuses every request that carries an Origin header.
// Browsers send one with every cross-site POST (a plain form POST needs no
// preflight), so without this a web page open on the node's host could
// move the clock of a node started with fault injection; the CLI, curl and
// the tests send none.
func refuseBrowsers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" {
			writeJSON(w, 403, jsonError{Error: fmt.Sprintf("fault injection refuses requests from web pages (Origin %q): use `firn fault` or curl", o), Code: "PermissionDenied"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// --- the status page --------------------------------------------------

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"ts":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>firn {{.Node}} — {{if .AllServing}}serving{{else}}NOT SERVING{{end}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#111;background:#fff}
h1{font-size:1.4rem} h2{font-size:1.15rem;margin-top:1.6rem}
.serving{color:#0a6b22;font-weight:bold} .down{color:#b00020;font-weight:bold}
table{border-collapse:collapse;margin:.4rem 0} td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left;vertical-align:top}
.warn{background:#fff3cd;padding:.4rem .8rem;border:1px solid #e0c060} .fault{background:#fde2e2;padding:.4rem .8rem;border:1px solid #d08080}
small{color:#555}
</style></head><body>
<h1>firn node {{.Node}} <small>cluster {{.Cluster}} · {{.Coordinator}} · version {{.Version}} · instance {{.Instance}}</small></h1>
<p>Clock: {{ts .Now}}{{if .Fault}} <span class="fault">FAULT INJECTION ON: clock offset {{dur .FaultOffset}}</span>{{end}}</p>
{{if .NoNTP}}<p class="warn">No NTP configured (--ntp): clock drift is unchecked.</p>{{else}}<p>NTP: {{.NTP}}</p>{{end}}
{{if .EmbeddedURL}}<p>Embedded etcd: {{.EmbeddedURL}} (a second local node joins with <code>--etcd {{.EmbeddedURL}}</code>; two embedded coordinators are two separate ID spaces)</p>{{end}}
<p>Peers: {{.Peers}}</p>
{{range .Gens}}
<h2>Generator {{.Name}}{{if .IsDefault}} (default){{end}}: {{if .Serving}}<span class="serving" id="state-{{.Name}}">SERVING</span>{{else}}<span class="down" id="state-{{.Name}}">NOT SERVING</span>{{end}}</h2>
{{if not .Serving}}<p class="down" id="reason-{{.Name}}">Why: {{.Reason}}</p>{{end}}
<table>
<tr><th>state</th><td>{{.State}}</td></tr>
<tr><th>layout</th><td><code>{{.Layout}}</code> (runs out {{ts .LayoutEnd}})</td></tr>
<tr><th>worker / datacenter</th><td>{{if .HasLease}}{{.Worker}} / {{.Datacenter}}{{else}}none held{{end}}</td></tr>
<tr><th>reserved until</th><td>{{if .HasLease}}{{ts .ReservedUntil}}{{else}}—{{end}}</td></tr>
<tr><th>clock lead</th><td>{{dur .ClockLead}} (limit max-lead {{dur .MaxLead}})</td></tr>
<tr><th>max staleness</th><td>{{dur .MaxStaleness}}</td></tr>
<tr><th>IDs issued</th><td>{{.Issued}} (rate {{printf "%.0f" .Rate}}/s)</td></tr>
<tr><th>ring buffer</th><td>{{.Ring.Available}} of {{.Ring.Capacity}} (target {{.Ring.Target}}), empty hits {{.Ring.EmptyHits}}, stale dropped {{.Ring.DroppedStale}}</td></tr>
<tr><th>max batch</th><td>{{.MaxBatch}}</td></tr>
</table>
<p>Recent state changes, newest first (times on this node's clock):</p>
<table><tr><th>when</th><th>time</th><th>from</th><th>to</th><th>reason</th></tr>
{{range .Events}}<tr><td>{{.Ago}}</td><td>{{ts .At}}</td><td>{{.From}}</td><td>{{.To}}</td><td>{{.Reason}}</td></tr>{{else}}<tr><td colspan="5">none</td></tr>{{end}}
</table>
{{end}}
<p><small>This page refreshes every 2 s and needs no scripts. /readyz and /metrics carry the same facts.</small></p>
</body></html>`))

type statusGen struct {
	GeneratorStatus
	Rate   float64
	Events []statusEvent // newest first; shadows GeneratorStatus.Events
}

type statusEvent struct {
	event
	Ago string
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	wall, mono := n.clock.Now()
	data := struct {
		Node, Cluster, Coordinator, Version, Instance, EmbeddedURL, NTP, Peers string
		Now                                                                    time.Time
		Fault, NoNTP, AllServing                                               bool
		FaultOffset                                                            time.Duration
		Gens                                                                   []statusGen
	}{Node: n.nodeInfo.Name, Cluster: n.cfg.Cluster, Coordinator: n.coordName, Version: n.cfg.Version,
		Instance: n.nodeInfo.InstanceID, EmbeddedURL: n.embeddedURL, Now: wall,
		Fault: n.cfg.EnableFaultInjection, NoNTP: len(n.cfg.NTP) == 0, AllServing: true}
	if n.offset != nil {
		data.FaultOffset = n.offset.CurrentOffset()
	}
	if off, ok := n.policy.lastNTPOffset(); ok {
		data.NTP = fmt.Sprintf("offset %v (limit --max-clock-offset %v)", off.Round(time.Microsecond), n.cfg.MaxClockOffset)
	} else if len(n.cfg.NTP) > 0 {
		data.NTP = fmt.Sprintf("no usable answer yet (limit --max-clock-offset %v)", n.cfg.MaxClockOffset)
	}
	if checked, count, skew := n.policy.peerStatus(); checked {
		nodes := "nodes"
		if count == 1 {
			nodes = "node (this one)"
		}
		data.Peers = fmt.Sprintf("%d live %s; this clock is %v from their median (limit --max-peer-skew %v)",
			count, nodes, skew.Round(time.Millisecond), n.cfg.MaxPeerSkew)
	} else {
		data.Peers = "not checked yet"
	}
	for _, rt := range n.gens {
		st := rt.status(wall)
		if !st.Serving {
			data.AllServing = false
		}
		sg := statusGen{GeneratorStatus: st, Rate: rt.recentRate(mono)}
		for i := len(st.Events) - 1; i >= 0; i-- {
			e := st.Events[i]
			sg.Events = append(sg.Events, statusEvent{event: e, Ago: wall.Sub(e.At).Round(100*time.Millisecond).String() + " ago"})
		}
		data.Gens = append(data.Gens, sg)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	statusTmpl.Execute(w, data)
}

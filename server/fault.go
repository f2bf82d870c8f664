package server

// The fault endpoint: POST and GET /debug/fault/clock-offset on the fault
// listener (--fault-addr), served only with fault injection on
// (docs/design.md, Interfaces). It moves the node's Offset clock, never the
// machine's.

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/firnid/firn/server/core"
)

func (n *Node) faultHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /debug/fault/clock-offset", func(w http.ResponseWriter, r *http.Request) {
		s := r.FormValue("offset")
		d, err := time.ParseDuration(s)
		if err != nil {
			writeErr(w, core.BadField("offset", s, "a Go duration", "offset %q is not a Go duration (e.g. -5s, 300ms, 0)", s))
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
	// On loopback (the default) the listener answers local callers alone:
	// a page that rebound its own name to 127.0.0.1 sends no Origin with a
	// GET, but its own name as Host. A listener moved off loopback
	// (--fault-addr-allow-remote) is reached by other names.
	if host, _, err := net.SplitHostPort(n.faultLis.Addr().String()); err == nil && core.LoopbackHost(host) {
		return LocalOnly("fault injection", mux)
	}
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
			writeDenied(w, fmt.Sprintf("fault injection refuses requests from web pages (Origin %q): use `firn fault` or curl", o))
			return
		}
		h.ServeHTTP(w, r)
	})
}

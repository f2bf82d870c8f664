// Command firn-healthz is the container health check of the firn image: it
// GETs a firn node's /healthz and exits 0 on a 200 answer, 1 otherwise. The
// image is built on an empty base with no shell and no HTTP client, so the
// check ships as its own small static binary.
//
//	firn-healthz [URL]    (default http://127.0.0.1:7301/healthz)
package main

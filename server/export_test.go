package server

import "net/http"

// WriteHTTPError answers err as the HTTP API's handlers do; tests only.
func WriteHTTPError(w http.ResponseWriter, err error) { writeErr(w, err) }

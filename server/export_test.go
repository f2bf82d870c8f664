package server

import (
	"net/http"

	"github.com/firnid/firn/coordinator"
)

// SetJournalHook wraps every generator's data-dir journal of nodes built
// afterwards (nil: none); tests only.
func SetJournalHook(f func(coordinator.Journal) coordinator.Journal) { journalHook = f }

// WriteHTTPError answers err as the HTTP API's handlers do; tests only.
func WriteHTTPError(w http.ResponseWriter, err error) { writeErr(w, err) }

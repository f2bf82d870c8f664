package server

import "github.com/firnid/firn/coordinator"

// SetJournalHook wraps every generator's data-dir journal of nodes built
// afterwards (nil: none); tests only.
func SetJournalHook(f func(coordinator.Journal) coordinator.Journal) { journalHook = f }

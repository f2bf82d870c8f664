//go:build firn_weakstep

package clockpolicy

import "github.com/firnid/firn/clockguard"

// firn_weakstep, a weakened build for the simulator (test/run.sh; see
// generator/steprule_weakstep.go): the clock policy absorbs a backward
// step beyond max-lead instead of holding the generators out.
func holdsOnRollback(clockguard.Step) bool { return false }

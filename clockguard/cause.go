package clockguard

import "time"

// Code is the machine-readable cause of a refusal: one of a fixed list,
// the same names as the API's ErrorReason enum (proto/firn/v1/firn.proto),
// carried in every refusal's google.rpc.ErrorInfo and in the HTTP API's
// error body (docs/design.md, Errors). A program branches on the code; the
// Reason beside it is for people.
type Code string

// The codes a serving state reports. The API adds NOT_FOUND and
// BAD_REQUEST, which are about the request, not the generator.
const (
	CodeClockRollback          Code = "CLOCK_ROLLBACK"          // backward step beyond max-lead
	CodeClockStep              Code = "CLOCK_STEP"              // forward step beyond --max-clock-offset, not yet confirmed
	CodeClockRange             Code = "CLOCK_RANGE"             // clock outside the layout's time range
	CodeNTPOffset              Code = "NTP_OFFSET"              // NTP offset beyond --max-clock-offset (or too few usable answers)
	CodeNTPUnreachable         Code = "NTP_UNREACHABLE"         // NTP required and unreachable
	CodePeerSkew               Code = "PEER_SKEW"               // this node is the clock outlier among its peers
	CodeCoordinatorUnavailable Code = "COORDINATOR_UNAVAILABLE" // the coordinator cannot be reached or does not confirm
	CodeLeaseLost              Code = "LEASE_LOST"              // worker lease lost, expired or taken over; acquiring again
	CodeReservationExhausted   Code = "RESERVATION_EXHAUSTED"   // the clock reached the reservation and no new one was confirmed
	CodeRestoreDetected        Code = "RESTORE_DETECTED"        // coordinator state restored, recreated or rolled back
	CodeInstanceConflict       Code = "INSTANCE_CONFLICT"       // data dir copied or moved, or the node name held by another instance
	CodeOperatorHold           Code = "OPERATOR_HOLD"           // held until an operator resumes it (--rollback-recovery manual)
	CodeDraining               Code = "DRAINING"                // shutting down
	CodeStarting               Code = "STARTING"                // start checks not yet passed
	CodeClockUnchecked         Code = "CLOCK_UNCHECKED"         // no clock check: no NTP answering and fewer than three live nodes
)

// Codes lists every code a serving state reports, in the API's order.
var Codes = []Code{
	CodeClockRollback, CodeClockStep, CodeClockRange, CodeNTPOffset, CodeNTPUnreachable,
	CodePeerSkew, CodeCoordinatorUnavailable, CodeLeaseLost, CodeReservationExhausted,
	CodeRestoreDetected, CodeInstanceConflict, CodeOperatorHold, CodeDraining, CodeStarting,
	CodeClockUnchecked,
}

// defaultCode is the code of a reason set without one: what the source
// usually means.
func defaultCode(s Source) Code {
	switch s {
	case SourceNTP:
		return CodeNTPOffset
	case SourceClockRollback:
		return CodeClockRollback
	case SourceClockRange:
		return CodeClockRange
	case SourceClockStep:
		return CodeClockStep
	case SourcePeers:
		return CodePeerSkew
	case SourceReservation:
		return CodeReservationExhausted
	case SourceLease:
		return CodeLeaseLost
	case SourceInstance:
		return CodeInstanceConflict
	case SourceCoordinator:
		return CodeRestoreDetected
	case SourceManual:
		return CodeOperatorHold
	case SourceClockUnchecked:
		return CodeClockUnchecked
	}
	return CodeStarting
}

// Detail is the machine-readable part of a held reason.
type Detail struct {
	// Code is the cause; empty means the source's usual code.
	Code Code
	// Limit and Measured are the bound and the value that broke it, as
	// text with units ("1s", "3.2s"); empty when the cause has none.
	Limit, Measured string
	// RetryAt is when the source expects to release its hold (wall
	// reading); zero when it cannot know.
	RetryAt time.Time
	// RetryEvery, where the source cannot know when, is how soon after
	// any moment its hold may end at the earliest: it tries again no
	// sooner (a reservation write retried every 200 ms), so a caller
	// retrying sooner is refused again.
	RetryEvery time.Duration
}

// SetCause is Set with the machine-readable cause of the reason (its Detail).
func (s *ServingState) SetCause(source Source, reason string, d Detail) {
	s.set(source, reason, d)
}

// Held reports, for every code, whether it holds the generator out now:
// the codes of the held reasons, DRAINING while draining or stopped, and
// STARTING while the start checks run with nothing else held. Every code
// is false while serving. It is what the firn_not_serving{cause} gauges
// export.
func (sn Snapshot) Held() map[Code]bool {
	held := make(map[Code]bool, len(Codes))
	switch sn.State {
	case StateServing:
		return held
	case StateDraining, StateStopped:
		held[CodeDraining] = true
		return held
	}
	for _, c := range sn.Causes {
		held[c.Code] = true
	}
	if len(sn.Causes) == 0 {
		held[CodeStarting] = true
	}
	return held
}

// Refusal is what a refusal reports: the code, the first held reason's
// detail and the human reason.
type Refusal struct {
	Code            Code
	Reason          string
	Limit, Measured string
	RetryAt         time.Time
	RetryEvery      time.Duration
}

// Refusal returns the cause to report for a call refused now; Code is ""
// while serving. The first held reason decides the code, limit and
// measured value, except while draining or stopped (DRAINING) and while
// starting with nothing held (STARTING); RetryAt is the latest of the held
// reasons' known release times, RetryEvery the longest of their retry
// cadences.
func (sn Snapshot) Refusal() Refusal {
	r := Refusal{Reason: sn.Reason}
	switch sn.State {
	case StateServing:
		return Refusal{}
	case StateDraining, StateStopped:
		r.Code = CodeDraining
		return r
	}
	if len(sn.Causes) == 0 {
		r.Code = CodeStarting
		return r
	}
	c := sn.Causes[0]
	r.Code, r.Limit, r.Measured = c.Code, c.Limit, c.Measured
	// Serving needs every hold released: the latest known release is the
	// hint (a hold that cannot know adds nothing to it).
	for _, c := range sn.Causes {
		if c.RetryAt.After(r.RetryAt) {
			r.RetryAt = c.RetryAt
		}
		r.RetryEvery = max(r.RetryEvery, c.RetryEvery)
	}
	return r
}

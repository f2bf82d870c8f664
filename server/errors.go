package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
	"github.com/firnid/firn/seq/sections"
	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/core"
)

// The reasons of the API's ErrorInfo that are about the request rather
// than the generator (the rest are clockguard's codes).
const (
	reasonNotFound   clockguard.Code = "NOT_FOUND"
	reasonBadRequest clockguard.Code = "BAD_REQUEST"
	reasonOverloaded clockguard.Code = "OVERLOADED"
	reasonWrongNode  clockguard.Code = "WRONG_NODE"
	reasonMoving     clockguard.Code = "SECTION_MOVING"
	reasonDenied     clockguard.Code = "PERMISSION_DENIED"
)

// ErrorDomain is the domain of every ErrorInfo the node sends: the name
// of the service whose reasons they are (AIP-193), the one service that
// refuses with them.
const ErrorDomain = "firn.v1.IDService"

// code maps an error to its gRPC code: the one table of the node. HTTP
// status codes derive from it (httpStatus).
func code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, core.ErrBadRequest):
		return codes.InvalidArgument
	case errors.Is(err, core.ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.As(err, new(*sections.WrongNodeError)):
		return codes.FailedPrecondition
	case errors.As(err, new(*sections.MovingError)), errors.As(err, new(*sections.RaiseError)):
		return codes.Unavailable
	case refusedWithCause(err):
		return codes.Unavailable
	case errors.Is(err, core.ErrUnknownGenerator):
		return codes.NotFound
	case errors.Is(err, core.ErrNotServing),
		errors.Is(err, generator.ErrRollback),
		errors.Is(err, generator.ErrClockRange),
		errors.Is(err, generator.ErrReservation),
		errors.Is(err, generator.ErrForwardStep),
		errors.Is(err, generator.ErrRetired),
		errors.Is(err, ringbuffer.ErrNoSource),
		errors.Is(err, ringbuffer.ErrClosed):
		return codes.Unavailable
	case errors.Is(err, admission.ErrOverloaded), errors.Is(err, generator.ErrAhead):
		return codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// refusedWithCause reports whether err is an admission refusal of one
// call with a cause of its own rather than an overload
// (admission.OverloadedError.Cause): answered UNAVAILABLE, as that cause
// is when it holds a generator.
func refusedWithCause(err error) bool {
	var oe *admission.OverloadedError
	return errors.As(err, &oe) && oe.Cause != ""
}

// detail is the machine-readable part of a refusal: the ErrorInfo reason
// and metadata, and the retry delay (0: unknown).
type detail struct {
	reason   clockguard.Code
	metadata map[string]string
	retry    time.Duration
}

// describe maps an error to its detail; ok is false for errors that carry
// none (deadline, cancellation, internal faults).
func describe(err error) (d detail, ok bool) {
	meta := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				k, v := withUnit(kv[i], kv[i+1])
				m[k] = v
			}
		}
		return m
	}
	var ns *core.NotServingError
	var oe *admission.OverloadedError
	var re *core.RequestError
	var ue *core.UnknownGeneratorError
	var rb *generator.RollbackError
	var ahead *generator.AheadError
	var wn *sections.WrongNodeError
	var mv *sections.MovingError
	var rs *sections.RaiseError
	var pe *core.PermissionError
	var retired *core.RetiredError
	switch {
	case errors.As(err, &pe):
		return detail{reasonDenied, meta("generator", pe.Generator), 0}, true
	case errors.As(err, &wn):
		return detail{reasonWrongNode, meta("generator", wn.Generator, "owner", wn.Owner.Address, "owner_name", wn.Owner.Name,
			"section", strconv.Itoa(wn.Section)), 0}, true
	case errors.As(err, &mv):
		return detail{reasonMoving, meta("generator", mv.Generator, "section", strconv.Itoa(mv.Section)), mv.RetryAfter}, true
	case errors.As(err, &rs):
		return detail{clockguard.CodeCoordinatorUnavailable, meta("generator", rs.Generator, "section", strconv.Itoa(rs.Section)), 0}, true
	case errors.As(err, &ns):
		return detail{ns.Code, meta("generator", ns.Generator, "limit", ns.Limit, "measured", ns.Measured), ns.RetryAfter}, true
	case errors.As(err, &oe):
		if oe.Cause != "" {
			// A refusal of this call alone with a cause of its own (a
			// segment generator short of IDs while claims fail): no
			// queue bound, what the node holds and what was asked.
			return detail{clockguard.Code(oe.Cause), meta("generator", oe.Generator, "limit_ids", strconv.FormatInt(oe.Have, 10),
				"measured_ids", strconv.Itoa(oe.Asked)), oe.RetryAfter}, true
		}
		if oe.Detail != "" {
			// A refusal its Detail explains (a claim settling past the
			// deadline): no queue figures, which would read 0.
			return detail{reasonOverloaded, meta("generator", oe.Generator, "bound", oe.Bound()), oe.RetryAfter}, true
		}
		if oe.ClientRate > 0 {
			return detail{reasonOverloaded, meta("generator", oe.Generator, "bound", oe.Bound(),
				"limit_ids_per_second", strconv.FormatFloat(oe.ClientRate, 'g', -1, 64), "burst_ids", strconv.FormatInt(oe.ClientBurst, 10)), oe.RetryAfter}, true
		}
		return detail{reasonOverloaded, meta("generator", oe.Generator, "bound", oe.Bound(), "limit_ids", strconv.FormatInt(oe.Limit, 10),
			"measured_ids", strconv.FormatInt(oe.Queued, 10)), oe.RetryAfter}, true
	case errors.As(err, &re):
		return detail{reasonBadRequest, meta("field", re.Field, "value", re.Value, "limit", re.Limit), 0}, true
	case errors.As(err, &ue):
		return detail{reasonNotFound, meta("generator", ue.Name, "known", ue.Known), 0}, true
	case errors.As(err, &retired):
		return detail{reasonNotFound, meta("generator", retired.Generator, "retired", retired.At.UTC().Format(time.RFC3339)), 0}, true
	case errors.Is(err, core.ErrBadRequest):
		return detail{reasonBadRequest, meta(), 0}, true
	case errors.Is(err, core.ErrUnknownGenerator):
		return detail{reasonNotFound, meta(), 0}, true
	case errors.As(err, &rb):
		return detail{clockguard.CodeClockRollback, meta("limit", rb.Limit.String(), "measured", rb.Step.Round(time.Millisecond).String()), rb.RetryAfter}, true
	case errors.Is(err, generator.ErrRollback):
		return detail{clockguard.CodeClockRollback, meta(), 0}, true
	case errors.Is(err, generator.ErrClockRange):
		return detail{clockguard.CodeClockRange, meta(), 0}, true
	case errors.As(err, &ahead):
		// The generator's lead is used: the IDs asked for come only as the
		// clock advances, later than the caller would wait. Overloaded, as
		// a queue too long for the deadline is, and RetryInfo the wait.
		return detail{reasonOverloaded, meta("bound", "max-lead", "limit", ahead.Limit.String(),
			"measured", ahead.Lead.Round(time.Millisecond).String()), ahead.Wait}, true
	case errors.Is(err, generator.ErrReservation):
		return detail{clockguard.CodeReservationExhausted, meta(), 0}, true
	case errors.Is(err, generator.ErrForwardStep):
		return detail{clockguard.CodeClockStep, meta(), 0}, true
	case errors.Is(err, generator.ErrRetired), errors.Is(err, ringbuffer.ErrNoSource):
		return detail{clockguard.CodeLeaseLost, meta(), 0}, true
	case errors.Is(err, ringbuffer.ErrClosed):
		return detail{clockguard.CodeDraining, meta(), 0}, true
	}
	return detail{}, false
}

// withUnit is a limit or measured metadata pair as AIP-193 would have it:
// the unit in the key, the value a bare number. A duration ("250ms", "3.2s") becomes
// key_ms with its milliseconds; a count of live nodes ("3 live nodes")
// key_nodes with the count. Any other value is kept as it is (a request's
// bound "[1, 1000]" is a range of a count, which has no unit).
func withUnit(key, value string) (string, string) {
	if key != "limit" && key != "measured" {
		return key, value // names, and measures whose key carries their unit
	}
	if d, err := time.ParseDuration(value); err == nil && value != "0" {
		return key + "_ms", strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
	}
	if n, rest, ok := strings.Cut(value, " "); ok && (rest == "live node" || rest == "live nodes") {
		if _, err := strconv.Atoi(n); err == nil {
			return key + "_nodes", n
		}
	}
	return key, value
}

// grpcError turns an error into a gRPC status error carrying
// google.rpc.ErrorInfo (domain ErrorDomain), when the node knows when it will
// serve again google.rpc.RetryInfo, and for a request error naming a field
// google.rpc.BadRequest.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && code(err) == codes.Internal {
		return err
	}
	st := status.New(code(err), err.Error())
	d, ok := describe(err)
	if !ok {
		return st.Err()
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: string(d.reason), Domain: ErrorDomain, Metadata: d.metadata}}
	if d.retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.retry)})
	}
	// An invalid argument also names its field the standard way
	// (google.rpc.BadRequest), for tools that read no ErrorInfo.
	if re := (*core.RequestError)(nil); errors.As(err, &re) && re.Field != "" {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: re.Field, Description: re.Msg}}})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// httpError is the HTTP API's error body: {"error": {...}}.
type httpError struct {
	Error httpErrorBody `json:"error"`
}

type httpErrorBody struct {
	// Code is the gRPC code's name (UNAVAILABLE, INVALID_ARGUMENT, …).
	Code string `json:"code"`
	// Reason is the ErrorInfo reason; empty for errors that carry none.
	Reason string `json:"reason,omitempty"`
	// Message is the human explanation.
	Message string `json:"message"`
	// RetryAfterMS is when to try again, in milliseconds (also sent as
	// Retry-After in seconds); absent when unknown.
	RetryAfterMS int64             `json:"retry_after_ms,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// newHTTPError is the body and the Retry-After value ("" for none) of an
// error.
func newHTTPError(err error) (httpError, string) {
	c := code(err)
	b := httpErrorBody{Code: codeName(c), Message: err.Error()}
	retry := ""
	if d, ok := describe(err); ok {
		b.Reason, b.Metadata = string(d.reason), d.metadata
		if d.retry > 0 {
			b.RetryAfterMS = max(d.retry.Milliseconds(), 1)
			retry = strconv.FormatInt(int64((d.retry+time.Second-1)/time.Second), 10)
		}
	}
	return httpError{Error: b}, retry
}

// codeNames are the gRPC codes' canonical upper-case names.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

// codeName is a gRPC code as the canonical upper-case name.
func codeName(c codes.Code) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return c.String()
}

// httpStatus maps a gRPC code to an HTTP status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.InvalidArgument:
		return 400
	case codes.PermissionDenied:
		return 403
	case codes.NotFound:
		return 404
	case codes.FailedPrecondition:
		return 409
	case codes.Unavailable:
		return 503
	case codes.DeadlineExceeded:
		return 504
	case codes.Canceled:
		return 499
	case codes.ResourceExhausted:
		return 429
	}
	return 500
}

package client

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("client: closed")
	// ErrUnavailable is returned when a whole failover round failed: no
	// endpoint answered with IDs. The error wraps the last endpoint's
	// error (a gRPC status error, so status.Code sees its code).
	ErrUnavailable = errors.New("client: no endpoint serves")
	// ErrInvalidOption is wrapped by every error New returns for a bad
	// argument or option; the message names the option and its bound.
	ErrInvalidOption = errors.New("client: invalid option")
	// ErrInvalidCount is wrapped by the error of NextN and NextRange for a
	// count outside their bounds, and of the sequence calls for a count
	// outside [1, MaxSeqCount] (or NextSeqs without items).
	ErrInvalidCount = errors.New("client: invalid count")
	// ErrInvalidKey is wrapped by the error of the sequence calls for a
	// key outside [1, MaxSeqKey] bytes.
	ErrInvalidKey = errors.New("client: invalid key")
)

// EndpointError is one endpoint's failure, as wrapped in the error of a
// failed failover round or of a request an endpoint refused.
type EndpointError struct {
	Endpoint string
	Err      error
}

func (e *EndpointError) Error() string { return fmt.Sprintf("endpoint %s: %v", e.Endpoint, e.Err) }

func (e *EndpointError) Unwrap() error { return e.Err }

func optionErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}

// ErrorDomain is the domain of the node's google.rpc.ErrorInfo: the name
// of the service whose reasons they are (AIP-193).
const ErrorDomain = "firn.v1.IDService"

// Reason returns the cause a node gave for refusing the call that returned
// err: the ErrorInfo reason of the API (domain ErrorDomain), as the typed
// firnv1.ErrorReason. A program branches on it instead of parsing
// messages: for example, DRAINING and LEASE_LOST pass on their own, while
// RESTORE_DETECTED needs an operator. It is ERROR_REASON_UNSPECIFIED when
// err carries none (a network error, a deadline, a node of another
// version). For an error of a whole failover round it is the last
// endpoint's reason.
func Reason(err error) firnv1.ErrorReason {
	info, _ := details(err)
	if info == nil || info.GetDomain() != ErrorDomain {
		return firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return firnv1.ErrorReason(firnv1.ErrorReason_value[info.GetReason()])
}

// RetryAfter returns how long the node that refused the call expected to
// stay unable to serve, when it knew (RetryInfo).
func RetryAfter(err error) (time.Duration, bool) {
	_, retry := details(err)
	if retry == nil || retry.GetRetryDelay() == nil {
		return 0, false
	}
	return retry.GetRetryDelay().AsDuration(), true
}

// details finds the ErrorInfo and RetryInfo of the gRPC status err wraps.
func details(err error) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, nil
	}
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range se.GRPCStatus().Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	return info, retry
}

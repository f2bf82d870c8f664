package client

import (
	"errors"
	"fmt"
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
	// ErrInvalidCount is wrapped by NextN's error for a count outside its
	// bounds.
	ErrInvalidCount = errors.New("client: invalid count")
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

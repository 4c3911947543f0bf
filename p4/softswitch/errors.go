package softswitch

import (
	"errors"
	"fmt"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// codeError is an error with the canonical code the P4Runtime specification
// assigns to it.
type codeError struct {
	code codes.Code
	msg  string
}

func (e *codeError) Error() string { return e.msg }

func errorf(code codes.Code, format string, args ...any) error {
	return &codeError{code: code, msg: fmt.Sprintf(format, args...)}
}

// codeOf maps an error from validation or from the Target to a canonical code.
func codeOf(err error) codes.Code {
	var ce *codeError
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, ErrExists):
		return codes.AlreadyExists
	case errors.Is(err, ErrNotFound):
		return codes.NotFound
	case errors.Is(err, ErrFull):
		return codes.ResourceExhausted
	case errors.Is(err, p4info.ErrOutOfRange):
		return codes.OutOfRange
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	// The target refused the values (e.g. a rank beyond its bitmap width).
	return codes.InvalidArgument
}

// errorSpace names the error space of target-specific codes in p4.v1.Error.
const errorSpace = "switchml-softswitch-v1model"

// batchStatus builds the status of a Write or Read batch in which at least one
// operation failed: UNKNOWN with one p4.v1.Error per operation, in order.
func batchStatus(what string, errs []error) error {
	details := make([]protoadapt.MessageV1, 0, len(errs))
	var first string
	for _, err := range errs {
		pe := &p4v1.Error{CanonicalCode: int32(codeOf(err))}
		if err != nil {
			pe.Message = err.Error()
			pe.Space = errorSpace
			if first == "" {
				first = err.Error()
			}
		}
		details = append(details, protoadapt.MessageV1Of(pe))
	}
	st := status.New(codes.Unknown, fmt.Sprintf("%s failure: %s", what, first))
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

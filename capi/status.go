package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchml/switchml-go/switchml"
)

// Statuses, as switchml.h numbers them.
const (
	statusOK          = 0
	statusInvalid     = 1
	statusConfig      = 2
	statusHandle      = 3
	statusUnreachable = 4
	statusMismatch    = 5
	statusTimeout     = 6
	statusAborted     = 7
	statusClosed      = 8
	statusOther       = 9
)

var statusNames = []string{
	"SWITCHML_OK", "SWITCHML_ERR_INVALID", "SWITCHML_ERR_CONFIG", "SWITCHML_ERR_HANDLE",
	"SWITCHML_ERR_UNREACHABLE", "SWITCHML_ERR_MISMATCH", "SWITCHML_ERR_TIMEOUT",
	"SWITCHML_ERR_ABORTED", "SWITCHML_ERR_CLOSED", "SWITCHML_ERR_OTHER",
}

var (
	errInvalid  = errors.New("invalid argument")
	errNoHandle = errors.New("unknown handle")
	// errMismatch is a disagreement this layer finds itself (broadcast
	// sizes); the library's own is switchml.ErrJobMismatch.
	errMismatch = errors.New("size mismatch")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}

// statusOf classifies err for C callers. Aborts are tested first: an
// aborted job's error also wraps its cause, which may be a timeout.
func statusOf(err error) int {
	var ce *switchml.ConfigError
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, errInvalid):
		return statusInvalid
	case errors.As(err, &ce):
		return statusConfig
	case errors.Is(err, errNoHandle):
		return statusHandle
	case errors.Is(err, switchml.ErrAborted):
		return statusAborted
	case errors.Is(err, switchml.ErrControllerUnreachable):
		return statusUnreachable
	case errors.Is(err, switchml.ErrJobMismatch), errors.Is(err, errMismatch):
		return statusMismatch
	case errors.Is(err, switchml.ErrTimeoutBudget), errors.Is(err, context.DeadlineExceeded):
		return statusTimeout
	case errors.Is(err, switchml.ErrClosed):
		return statusClosed
	}
	return statusOther
}

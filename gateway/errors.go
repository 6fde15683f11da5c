package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/dlockdev/dlock"
)

// ErrUnauthenticated is what an Authenticator returns, wrapped with the
// reason, for a request without valid credentials: the gateway answers it
// with 401 unauthenticated.
var ErrUnauthenticated = errors.New("gateway: unauthenticated")

// ErrCredentials is returned by LoadCredentials and Credentials.Reload,
// wrapped with the file's name and line, for a file that cannot be used.
var ErrCredentials = errors.New("gateway: bad credentials file")

// ErrInvalidOption is returned by New for an option value out of range.
var ErrInvalidOption = errors.New("gateway: invalid option")

// The codes of the gateway's error replies: the "code" of the JSON body
// {"error": {"code": …, "message": …}}. They are stable: clients branch on
// them, never on the message, which is for people.
const (
	CodeUnauthenticated = "unauthenticated"     // 401: no valid credentials (bearer token or client certificate)
	CodeForbidden       = "forbidden"           // 403: the principal has no permission for this key or prefix
	CodeRateLimited     = "rate_limited"        // 429: the client is over its request rate: see Retry-After
	CodeTooManyStreams  = "too_many_streams"    // 429: the client has its maximum of streams open
	CodeMalformedJSON   = "malformed_json"      // 400: the body is not the JSON object the route takes
	CodeInvalidRequest  = "invalid_request"     // 400: a field is missing, unknown or out of range
	CodeInvalidKey      = "invalid_key"         // 400: the key is not one the library accepts
	CodeBodyTooLarge    = "body_too_large"      // 413: the body is longer than the gateway's limit
	CodeNotFound        = "not_found"           // 404: no such route
	CodeMethod          = "method_not_allowed"  // 405
	CodeLeaseNotFound   = "lease_not_found"     // 404: no lease has this id here (never had, or forgotten)
	CodeLeaseExpired    = "lease_expired"       // 410: not renewed within its TTL: the gateway released it
	CodeLeaseReleased   = "lease_released"      // 410: released already (a replayed release)
	CodeLeaseLost       = "lease_lost"          // 410: the backend ended the lease: work under it may have overlapped
	CodeLeaseStreamed   = "lease_streamed"      // 409: held by a stream, which keeps it alive: nothing to renew
	CodeWrongInstance   = "wrong_instance"      // 421: the lease lives in another gateway instance, named in the message
	CodeTicketNotFound  = "ticket_not_found"    // 404: the ticket is unknown or its place expired
	CodeTicketMismatch  = "ticket_mismatch"     // 400: the ticket waits for another key, kind or mode
	CodeTicketInUse     = "ticket_in_use"       // 409: another poll is waiting with this ticket
	CodeLocked          = "locked"              // 409: held by others, or others wait (an acquire with no wait)
	CodeNoLeader        = "no_leader"           // 404: nobody leads the election
	CodeKindMismatch    = "kind_mismatch"       // 409: the key is in use as another kind or limit
	CodeTooManyLeases   = "too_many_leases"     // 429: the gateway holds its maximum of leases
	CodeTooManyWaiters  = "too_many_waiters"    // 429: the gateway has its maximum of waits and tickets
	CodeTooManyWatches  = "too_many_watches"    // 429: the gateway has its maximum of watch streams or stream tickets
	CodeUnsupported     = "unsupported"         // 501: the backend cannot do this (inspect, list)
	CodeUnavailable     = "backend_unavailable" // 503: the backend cannot be reached
	CodeClosing         = "gateway_closing"     // 503: the gateway is shutting down
	CodeInternal        = "internal"            // 500: anything else, with the backend's message
)

// apiError is an error reply: its status, code and message.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// fromLibrary turns an error of package dlock into its reply.
func fromLibrary(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, dlock.ErrInvalidKey):
		return errorf(http.StatusBadRequest, CodeInvalidKey, "%v", err)
	case errors.Is(err, dlock.ErrInvalidOption):
		return errorf(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
	case errors.Is(err, dlock.ErrKindMismatch):
		return errorf(http.StatusConflict, CodeKindMismatch, "%v", err)
	case errors.Is(err, dlock.ErrLocked):
		return errorf(http.StatusConflict, CodeLocked, "%v", err)
	case errors.Is(err, dlock.ErrClosed), errors.Is(err, errClosing):
		return errorf(http.StatusServiceUnavailable, CodeClosing, "%v", err)
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "%v", err)
	case errors.Is(err, errors.ErrUnsupported):
		return errorf(http.StatusNotImplemented, CodeUnsupported, "%v", err)
	}
	return errorf(http.StatusInternalServerError, CodeInternal, "%v", err)
}

// errClosing ends what is in flight when Close is called.
var errClosing = errors.New("gateway: closing")

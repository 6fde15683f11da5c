package httpfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/dlockdev/dlock"
)

// The request headers that carry a lock holder's fencing token, and the
// response headers of a refusal. Header names are case-insensitive; these are
// the canonical forms.
const (
	// FenceHeader names the fence a request writes under: what the token
	// is compared within, usually the lock's key or the resource's name.
	FenceHeader = "Dlock-Fence"
	// TokenHeader carries the writer's fencing token (Lease.Token) in
	// decimal.
	TokenHeader = "Dlock-Token"
	// RecordedHeader is set on a 409 refusal to the fence's recorded
	// token, the one that outranks the request's.
	RecordedHeader = "Dlock-Recorded"
	// RefusedHeader is set on every response the Guard answers itself
	// instead of the wrapped handler: "stale" (409), "unfenced" (428) or
	// "invalid" (400). CheckResponse reads it, so that a 409 of the
	// handler's own is not taken for a stale token.
	RefusedHeader = "Dlock-Refused"
)

// MaxFenceLen is the longest fence name, in bytes, that a request may carry.
// A fence costs the Guard memory for as long as it runs, so names are meant
// to be few and short: a lock key (at most dlock.MaxKeyLen bytes) fits.
const MaxFenceLen = 1024

// ErrUnfenced is returned for a request that carries neither FenceHeader
// nor TokenHeader on a route that requires them (Guard.Wrap answers 428
// Precondition Required). Headers that are there but cannot be used (one
// without the other, either given twice, an empty or overlong fence name,
// one with control characters or a space at either end, a token that is not a decimal number from 1 to 2^64-1; the Guard answers 400
// Bad Request) give an error wrapping dlock.ErrInvalidFence instead.
// CheckResponse returns either, wrapped with the Guard's answer;
// ReadHeaders returns them wrapped with what is wrong.
var ErrUnfenced = errors.New("httpfence: request carries no fencing token")

// Claim is what a fenced request says about its writer: the fence it writes
// under and its lease's token.
type Claim struct {
	Fence string
	Token uint64
}

// SetHeaders puts the fence name and token into h, replacing any there:
//
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body)
//	httpfence.SetHeaders(req.Header, "close-orders", lease.Token())
func SetHeaders(h http.Header, fence string, token uint64) {
	h.Set(FenceHeader, fence)
	h.Set(TokenHeader, strconv.FormatUint(token, 10))
}

// ReadHeaders returns the claim of the headers in h. It returns an error
// wrapping ErrUnfenced when h carries neither header, and one wrapping
// dlock.ErrInvalidFence, saying what is wrong, when the headers cannot be used.
func ReadHeaders(h http.Header) (Claim, error) {
	fences, tokens := h.Values(FenceHeader), h.Values(TokenHeader)
	switch {
	case len(fences) == 0 && len(tokens) == 0:
		return Claim{}, fmt.Errorf("%w: want headers %s and %s", ErrUnfenced, FenceHeader, TokenHeader)
	case len(fences) == 0:
		return Claim{}, fmt.Errorf("%w: %s without %s", dlock.ErrInvalidFence, TokenHeader, FenceHeader)
	case len(tokens) == 0:
		return Claim{}, fmt.Errorf("%w: %s without %s", dlock.ErrInvalidFence, FenceHeader, TokenHeader)
	case len(fences) > 1:
		// Two values could be two writers' claims merged by a proxy:
		// neither can be trusted.
		return Claim{}, fmt.Errorf("%w: %s given %d times", dlock.ErrInvalidFence, FenceHeader, len(fences))
	case len(tokens) > 1:
		return Claim{}, fmt.Errorf("%w: %s given %d times", dlock.ErrInvalidFence, TokenHeader, len(tokens))
	}
	fence, raw := fences[0], tokens[0]
	if err := validFence(fence); err != nil {
		return Claim{}, err
	}
	token, err := strconv.ParseUint(raw, 10, 64)
	switch {
	case err != nil:
		return Claim{}, fmt.Errorf("%w: fence %q: %s %q is not a decimal number from 1 to 2^64-1", dlock.ErrInvalidFence, fence, TokenHeader, raw)
	case token == 0:
		return Claim{}, fmt.Errorf("%w: fence %q: token 0 is no lease's token", dlock.ErrInvalidFence, fence)
	}
	return Claim{Fence: fence, Token: token}, nil
}

func validFence(fence string) error {
	switch {
	case fence == "":
		return fmt.Errorf("%w: empty %s", dlock.ErrInvalidFence, FenceHeader)
	case len(fence) > MaxFenceLen:
		return fmt.Errorf("%w: %s of %d bytes, more than %d", dlock.ErrInvalidFence, FenceHeader, len(fence), MaxFenceLen)
	case !utf8.ValidString(fence):
		return fmt.Errorf("%w: %s %q is not UTF-8", dlock.ErrInvalidFence, FenceHeader, fence)
	case fence[0] == ' ' || fence[len(fence)-1] == ' ':
		// HTTP drops them (net/http trims header values): the Guard
		// would fence the request under another name than its client's.
		return fmt.Errorf("%w: %s %q begins or ends with a space", dlock.ErrInvalidFence, FenceHeader, fence)
	}
	for _, r := range fence {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q has control characters", dlock.ErrInvalidFence, FenceHeader, fence)
		}
	}
	return nil
}

type claimKey struct{}

// FromContext returns the claim that the Guard admitted for the request
// whose context ctx is (http.Request.Context), for the handler to pass on,
// for instance to sqlfence:
//
//	claim, _ := httpfence.FromContext(r.Context())
//	err := fences.Do(ctx, db, claim.Fence, claim.Token, …)
//
// ok is false for a request that did not pass through a Guard, or passed
// unfenced through Guard.WrapOptional.
func FromContext(ctx context.Context) (claim Claim, ok bool) {
	claim, ok = ctx.Value(claimKey{}).(Claim)
	return claim, ok
}

// NewContext returns a copy of ctx that carries claim, as the Guard gives it
// to the wrapped handler; for tests of such handlers.
func NewContext(ctx context.Context, claim Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, claim)
}

package httpfence

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// serve runs h on a request of the fence and token, with ctx, in a
// goroutine; the channel gets the recorder when h returns.
func serve(ctx context.Context, h http.Handler, fence string, token uint64) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	SetHeaders(req.Header, fence, token)
	go func() {
		rec := httptest.NewRecorder()
		defer func() {
			_ = recover() // the panic test's handler
			done <- rec
		}()
		h.ServeHTTP(rec, req)
	}()
	return done
}

func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		panic("unreachable")
	}
}

// TestGuard_hungHandlerStallsOnlyItsFence: while a handler of fence a does
// not return, a second request of fence a waits and gives up with a 503 when
// its context ends, without reaching the handler or recording its token;
// fence b is served meanwhile; once the first handler returns, fence a
// serves again.
func TestGuard_hungHandlerStallsOnlyItsFence(t *testing.T) {
	waiting := make(chan string, 4)
	g := New()
	g.waiting = func(f string) { waiting <- f }
	entered, release := make(chan uint64, 4), make(chan struct{})
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim, _ := FromContext(r.Context())
		entered <- claim.Token
		if claim.Token == 1 {
			<-release
		}
	}))

	first := serve(context.Background(), h, "a", 1)
	await(t, waiting, "wait of request 1")
	if tok := await(t, entered, "handler of request 1"); tok != 1 {
		t.Fatalf("handler entered with token %d, want 1", tok)
	}

	ctx, cancel := context.WithCancel(context.Background())
	second := serve(ctx, h, "a", 2)
	await(t, waiting, "wait of request 2")
	// Request 2 cannot take fence a (request 1 holds it), so the end of
	// its context is the only way on.
	cancel()
	rec := await(t, second, "answer to request 2")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `fence "a"`) {
		t.Errorf("request 2: %d %q, want 503 naming the fence", rec.Code, rec.Body)
	}
	if got := g.Recorded("a"); got != 1 {
		t.Errorf("fence a recorded %d, want 1: a request that gave up records nothing", got)
	}

	third := serve(context.Background(), h, "b", 5)
	await(t, waiting, "wait of request 3")
	if rec := await(t, third, "answer of fence b"); rec.Code != http.StatusOK {
		t.Errorf("fence b while a hangs: %d, want 200", rec.Code)
	}

	close(release)
	if rec := await(t, first, "answer to request 1"); rec.Code != http.StatusOK {
		t.Errorf("request 1: %d", rec.Code)
	}
	fourth := serve(context.Background(), h, "a", 2)
	await(t, waiting, "wait of request 4")
	if rec := await(t, fourth, "answer to request 4"); rec.Code != http.StatusOK {
		t.Errorf("fence a after the hung handler returned: %d, want 200", rec.Code)
	}
	close(entered)
	var tokens []uint64
	for tok := range entered {
		tokens = append(tokens, tok)
	}
	if len(tokens) != 2 || tokens[0] != 5 || tokens[1] != 2 {
		t.Errorf("handler entered with %v after token 1, want [5 2]: request 2 must not have reached it", tokens)
	}
}

// TestGuard_panickingHandlerReleasesItsFence: net/http recovers a handler's
// panic and serves on; the fence must not stay held.
func TestGuard_panickingHandlerReleasesItsFence(t *testing.T) {
	g := New()
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if claim, _ := FromContext(r.Context()); claim.Token == 1 {
			panic(http.ErrAbortHandler)
		}
	}))
	await(t, serve(context.Background(), h, "a", 1), "the panicking request")
	if rec := await(t, serve(context.Background(), h, "a", 2), "the next request"); rec.Code != http.StatusOK {
		t.Errorf("after a panic: %d, want 200", rec.Code)
	}
}

func TestReadHeaders_unfencedAndInvalidAreDistinct(t *testing.T) {
	if _, err := ReadHeaders(http.Header{}); !errors.Is(err, ErrUnfenced) || errors.Is(err, dlock.ErrInvalidFence) {
		t.Errorf("no headers: %v, want ErrUnfenced only", err)
	}
	if _, err := ReadHeaders(http.Header{"Dlock-Fence": {"f"}}); !errors.Is(err, dlock.ErrInvalidFence) || errors.Is(err, ErrUnfenced) {
		t.Errorf("fence only: %v, want dlock.ErrInvalidFence only", err)
	}
}

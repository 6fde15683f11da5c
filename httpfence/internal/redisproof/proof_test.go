package redisproof_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/httpfence"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]testproc.Role{"holder": holder})
}

// holderTTL is the frozen holder's lease: short, so that the test waits
// little for it to run out on the server.
const holderTTL = time.Second

func openRedis(ctx context.Context, addr string) (*dlock.Client, error) {
	return redisdlock.New(ctx, redis.NewClient(&redis.Options{Addr: addr}), nil)
}

// holder locks KEY on the Redis at REDIS, says its token, and on "write"
// PUTs "A" to URL with its token, without looking at its lease first: the
// holder that did not notice it was paused. It says "result ok", "result
// stale" (a *dlock.StaleTokenError from CheckResponse) or "result err …".
func holder(ctx context.Context, p *testproc.Peer) error {
	client, err := openRedis(ctx, p.Env("REDIS"))
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Lock(ctx, p.Env("KEY"), dlock.WithTTL(holderTTL))
	if err != nil {
		return err
	}
	p.Say("token %d", lease.Token())
	if err := p.Await("write"); err != nil {
		return err
	}
	err = put(ctx, p.Env("URL"), p.Env("KEY"), lease.Token(), "A")
	var stale *dlock.StaleTokenError
	switch {
	case err == nil:
		p.Say("result ok")
	case errors.As(err, &stale) && errors.Is(err, dlock.ErrStaleToken):
		p.Say("result stale %d %d", stale.Token, stale.Recorded)
	default:
		p.Say("result err %v", err)
	}
	return nil
}

// put writes value to the service at url, fenced by the key and token.
func put(ctx context.Context, url, fence string, token uint64, value string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(value))
	if err != nil {
		return err
	}
	httpfence.SetHeaders(req.Header, fence, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := httpfence.CheckResponse(resp); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return nil
}

// valueStore is the service's data: one value, set by PUT.
type valueStore struct {
	mu    sync.Mutex
	value string
}

func (s *valueStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.value = string(b)
	s.mu.Unlock()
}

func (s *valueStore) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

// frozenHolderWrites plays the frozen-holder proof: holder A, in a child
// process, locks the key and is frozen with SIGSTOP; the test's own client
// locks the key once A's lease has run out on Redis (Lock waits for it) and
// writes "B" with its token; A is thawed and writes "A" with its old token.
// It returns A's result line and the service's value.
func frozenHolderWrites(t *testing.T, guarded bool) (result, value string) {
	r := testserver.StartRedis(t)
	data := &valueStore{}
	var h http.Handler = data
	if guarded {
		h = httpfence.New().Wrap(data)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	key := "fence-" + strings.ReplaceAll(t.Name(), "/", "-")

	a := testproc.Start(t, "holder", "REDIS="+r.Addr(), "KEY="+key, "URL="+srv.URL)
	tokA, err := strconv.ParseUint(a.Expect(t, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a.Freeze(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := openRedis(ctx, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Lock(ctx, key, dlock.WithTTL(10*time.Second)) // waits for A's lease to run out
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	if lease.Token() <= tokA {
		t.Fatalf("B's token %d is not above A's %d", lease.Token(), tokA)
	}
	if err := put(ctx, srv.URL, key, lease.Token(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	a.Thaw(t)
	a.Tell(t, "write")
	result = a.Expect(t, "result")
	a.Wait(t)
	t.Logf("A (token %d): %s; B has token %d", tokA, result, lease.Token())
	return result, data.get()
}

// TestFence_frozenHolderRejected: with the Guard, the thawed holder's write
// is refused (409, a *dlock.StaleTokenError naming both tokens) and the
// service keeps B's value.
func TestFence_frozenHolderRejected(t *testing.T) {
	result, value := frozenHolderWrites(t, true)
	if !strings.HasPrefix(result, "stale ") {
		t.Errorf("A's write: %q, want refused as stale", result)
	}
	if value != "B" {
		t.Errorf("the service holds %q, want B", value)
	}
}

// TestFence_noGuard_staleWriteLands is the negative control: the same flow
// with the service unguarded lets the frozen holder's write through and
// overwrite B, so the test above would catch a Guard that let it pass.
func TestFence_noGuard_staleWriteLands(t *testing.T) {
	result, value := frozenHolderWrites(t, false)
	if result != "ok" {
		t.Errorf("A's write: %q, want accepted", result)
	}
	if value != "A" {
		t.Errorf("the service holds %q, want A: the stale write should have landed", value)
	}
}

package httpfence_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/httpfence"
)

// A service that closes orders for lock holders, and two holders: the one
// with token 42 writes first, so the late write of token 41, whose holder
// lost its lease, is refused.
func Example() {
	fences := httpfence.New()
	mux := http.NewServeMux()
	mux.Handle("POST /orders/close", fences.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim, _ := httpfence.FromContext(r.Context())
		fmt.Printf("closing orders for token %d\n", claim.Token)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, token := range []uint64{42, 41} { // lease.Token() of each holder
		req, _ := http.NewRequest("POST", srv.URL+"/orders/close", nil)
		httpfence.SetHeaders(req.Header, "close-orders", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		if err := httpfence.CheckResponse(resp); errors.Is(err, dlock.ErrStaleToken) {
			fmt.Println("refused:", err)
		}
	}
	// Output:
	// closing orders for token 42
	// refused: fence "close-orders": dlock: stale fencing token: 41, and 42 is recorded
}

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway"
	_ "github.com/dlockdev/dlock/memdlock" // registers mem:// for dlock.Open
)

// A gateway in front of a Client, and a client in another language's
// place: acquire, then release by lease id. The example runs on
// memdlock's in-memory lock space; any backend's URL works the same way
// (redis://…, etcd://…, zk://…) once its package is imported.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "mem://gateway-example")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	gw, err := gateway.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close(ctx)
	srv := httptest.NewServer(gw) // http.ListenAndServe("127.0.0.1:8420", gw) in a program
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/acquire", "application/json", strings.NewReader(`{"key":"orders","ttl_ms":10000}`))
	if err != nil {
		log.Fatal(err)
	}
	var lease struct {
		LeaseID  string `json:"lease_id"`
		TokenStr string `json:"token_str"`
		ValidFor int64  `json:"valid_for_ms"`
	}
	err = json.NewDecoder(resp.Body).Decode(&lease)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, "token", lease.TokenStr != "", "valid", lease.ValidFor > 0)

	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/leases/"+lease.LeaseID, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// 200 OK token true valid true
	// 200 OK
}

// A gateway that requires credentials: a request without a bearer token
// of the principals' is refused with 401, and one whose principal may not
// lock the key with 403. A program serves it with TLS (http.Server's
// TLSConfig), and reads its principals from a file with LoadCredentials.
func ExampleAuthenticate() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "mem://gateway-auth-example")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	orders, err := gateway.ParsePermission("lock:orders/")
	if err != nil {
		log.Fatal(err)
	}
	gw, err := gateway.New(client, gateway.Authenticate(func(r *http.Request) (gateway.Principal, error) {
		if r.Header.Get("Authorization") != "Bearer example-token-0123456789" { // a Credentials file compares in constant time
			return gateway.Principal{}, fmt.Errorf("%w: unknown bearer token", gateway.ErrUnauthenticated)
		}
		return gateway.Principal{Name: "orders-service", Permissions: gateway.Permissions{orders}}, nil
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close(ctx)
	srv := httptest.NewServer(gw)
	defer srv.Close()

	for _, c := range []struct{ token, key string }{{"", "orders/1"}, {"example-token-0123456789", "billing/1"}, {"example-token-0123456789", "orders/1"}} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/acquire", strings.NewReader(`{"key":"`+c.key+`"}`))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(c.key, resp.Status)
	}
	// Output:
	// orders/1 401 Unauthorized
	// billing/1 403 Forbidden
	// orders/1 200 OK
}

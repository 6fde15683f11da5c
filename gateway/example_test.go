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

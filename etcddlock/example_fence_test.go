package etcddlock_test

import (
	"context"
	"errors"
	"log"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Write to etcd only while the lease holds its key: the write and the
// check are one Txn. (These examples need an etcd server: compiled, not run.)
func ExampleIsOwner() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	client, err := etcddlock.New(ctx, cli, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	cmp, err := etcddlock.IsOwner(lease)
	if err != nil {
		log.Fatal(err) // dlock.ErrInvalidFence: not an etcd lease
	}
	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("orders/42", "closed")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	if !resp.Succeeded {
		// The lease had lost its key (expired during a pause, released):
		// nothing was written.
		log.Print(&dlock.StaleTokenError{Fence: lease.Key(), Token: lease.Token()})
	}
}

// OwnerTxn does the same and returns the StaleTokenError itself.
func ExampleOwnerTxn() {
	ctx := context.Background()
	cli, client := etcdClients(ctx)
	defer cli.Close()
	defer client.Close()

	err := client.Do(ctx, "orders/close-expired", func(ctx context.Context) error {
		lease, _ := dlock.LeaseFromContext(ctx)
		_, err := etcddlock.OwnerTxn(ctx, cli, lease, clientv3.OpPut("orders/42", "closed"))
		return err
	})
	if errors.Is(err, dlock.ErrStaleToken) {
		log.Print("lost the lock before writing; nothing written: ", err)
	}
}

// The token fence: data written by holders of a lock on any backend, fenced
// by the leases' tokens at the etcd key "fences/orders".
func ExampleFencedTxn() {
	ctx := context.Background()
	cli, client := etcdClients(ctx) // client may as well be Redis or ZooKeeper
	defer cli.Close()
	defer client.Close()

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	_, err = etcddlock.FencedTxn(ctx, cli, "fences/orders", lease.Token(),
		clientv3.OpPut("orders/42", "closed"),
		clientv3.OpDelete("orders/42/reservation"))
	var stale *dlock.StaleTokenError
	if errors.As(err, &stale) {
		log.Printf("token %d refused: %d is recorded; nothing written", stale.Token, stale.Recorded)
	}
}

// Both checks in one Txn of your own: FenceOp beside IsOwner.
func ExampleFenceOp() {
	ctx := context.Background()
	cli, client := etcdClients(ctx)
	defer cli.Close()
	defer client.Close()

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	cmp, err := etcddlock.IsOwner(lease)
	if err != nil {
		log.Fatal(err)
	}
	op, err := etcddlock.FenceOp("fences/orders", lease.Token(), clientv3.OpPut("orders/42", "closed"))
	if err != nil {
		log.Fatal(err)
	}
	resp, err := cli.Txn(ctx).If(cmp).Then(op).Commit()
	if err != nil {
		log.Fatal(err)
	}
	if !resp.Succeeded {
		log.Print("no longer the owner; nothing written")
		return
	}
	if _, err := etcddlock.FenceResult("fences/orders", lease.Token(), resp.Responses[0]); err != nil {
		log.Print(err) // a *dlock.StaleTokenError: a higher token was recorded
	}
}

// etcdClients returns an etcd client and a dlock Client built on it.
func etcdClients(ctx context.Context) (*clientv3.Client, *dlock.Client) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	client, err := etcddlock.New(ctx, cli, nil)
	if err != nil {
		log.Fatal(err)
	}
	return cli, client
}

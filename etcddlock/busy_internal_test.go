package etcddlock

import "testing"

// A burst of calls on one key sends one small Txn, not one each: the
// others go to the full join at once (10,000 waiters arriving together
// once sent 20,000 Txns and overran etcd's apply queue).
func TestBusyQueues_claim_oneSmallTxnAtATime(t *testing.T) {
	var b busyQueues
	if !b.claim("q") {
		t.Fatal("the first claim of a quiet queue was refused")
	}
	if b.claim("q") {
		t.Fatal("a second claim was allowed while the first small Txn is in flight")
	}
	if !b.claim("other") {
		t.Fatal("a claim of another queue was refused")
	}
	b.unclaim("q")
	if !b.claim("q") {
		t.Fatal("a claim after the first small Txn ended was refused")
	}
	b.unclaim("q")
	b.saw("q")
	if b.claim("q") {
		t.Fatal("a claim of a queue seen busy was allowed")
	}
}

// Package httpfence is net/http middleware for a service that accepts writes
// from lock holders: it refuses the writes of a holder whose lease was lost,
// at the service, by their fencing tokens.
//
// A lease alone cannot keep a paused holder from writing: a process frozen
// past its TTL (a garbage-collection pause, a VM migration, SIGSTOP) wakes up
// believing it holds the lock while the server has granted it to somebody
// else, and sends its write anyway. The service it writes to must check. The
// client sends its lease's token and the fence it writes under in two
// headers (FenceHeader, TokenHeader); the Guard keeps the highest token each
// fence has admitted and answers 409 Conflict to a request with a lower one.
//
// Service:
//
//	fences := httpfence.New()
//	mux.Handle("POST /orders/close", fences.Wrap(closeOrders))
//
// Client, holding a lease:
//
//	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/orders/close", body)
//	httpfence.SetHeaders(req.Header, "close-orders", lease.Token())
//	resp, err := http.DefaultClient.Do(req)
//	…
//	if err := httpfence.CheckResponse(resp); errors.Is(err, dlock.ErrStaleToken) {
//		// a newer holder has written: this one lost its lease, nothing was done
//	}
//
// or an http.Client whose Transport is a Transport of the lease.
//
// # What it guarantees
//
// Among the requests of one fence that a Guard admitted, the tokens are in
// the order the wrapped handler ran them: no request with a lower token is
// admitted after one with a higher token. The handler of one fence's
// requests runs one at a time: a request waits until the one before it has
// returned from its handler, so the effects a handler makes before it
// returns (its database transaction committed, its file written) order
// before those of a newer holder. This is the HTTP form of the row lock that
// package sqlfence takes in the database.
//
// A token is recorded when its request is admitted, before the handler
// runs, and stays recorded whether or not the handler succeeds: a newer
// holder has been seen, so every older holder's lease has ended.
//
// # What it does not do
//
//   - The table is in memory. A restarted service has forgotten every token
//     and admits the next request whatever its token, a stale one included.
//     Several replicas behind a load balancer each keep their own table, and
//     one replica admits what another has refused. Where either matters,
//     check in the database instead, in the handler, with package sqlfence
//     (FromContext gives the handler the claim to pass on); the Guard's 409
//     is then an early answer and the database's check is the guarantee.
//   - A handler that hangs stalls its fence: every later request of that
//     fence waits for it, each until its own context ends (503). Bound the
//     handler's work with the request's context. Do not put
//     http.TimeoutHandler between the Guard and the handler: it answers the
//     client but leaves the handler running after the fence has passed on.
//     Work a handler starts and does not finish before it returns (a
//     goroutine, a queued job) is not ordered.
//   - One fence's requests are served one at a time, the same holder's
//     included: a fence per resource that must be serialized, not one for a
//     whole service.
//   - Every fence name a request brings stays in the table for the life of
//     the Guard: fence names are meant to be few (a lock key, a resource
//     name), not one per request. Put the Guard behind the service's
//     authentication: it trusts the token a request carries.
//   - Routes wrapped by WrapOptional serve unfenced requests unchecked, and
//     a route not wrapped at all is not fenced: every write path of a fence
//     must go through the same Guard.
//
// The tokens of a semaphore's permits and of a read-write lock's readers are
// granted to holders that run at the same time, so one fence for all of them
// would refuse all but the newest: fence per item instead.
package httpfence

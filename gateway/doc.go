// Package gateway serves dlock's locks, semaphores, read-write locks and
// elections over HTTP/JSON, so that programs in any language take them with the guarantees
// Go programs get from package dlock: fair FIFO queues, fencing tokens, and
// leases that end when their holder stops renewing them. `dlock gateway`
// runs it; docs/gateway.md describes the API, and the gateway serves its
// OpenAPI document at /openapi.yaml.
//
// # Holding a lease
//
// An acquire returns an explicit lease: an unguessable id (the capability
// to renew and release it), its fencing token, and how long it is valid
// counted from when the gateway received the request. The client renews
// it within its TTL, or the lease ends. A streaming hold keeps the lease
// for as long as its response stays open instead.
//
// # Several instances
//
// Where the backend keeps a grant's state (Redis; etcd with a lease per
// grant), an explicit lease is held by no instance: its id carries a
// reference to the grant, signed with the LeaseKey, and each renew or
// release through any instance with that key is one request to the
// backend. Elsewhere (ZooKeeper, whose session lives in one process; etcd's
// shared lease; an election's term) the lease is sticky: it lives in the
// instance that granted it, and another answers 421 wrong_instance. Every
// lease reply says which in StickyHeader.
//
// # Safety
//
// The gateway holds a sticky lease through its dlock.Client, which renews
// it on the backend until its client stops renewing; the lease is lost,
// as any dlock lease, when renewals fail for its TTL. A lease any instance
// serves is renewed on the backend by its client's renews alone, and ends
// when the backend's TTL runs out. A client that trusts its lease past the
// validity the gateway last told it, or that does not pass the fencing
// token to the systems it writes to, is not protected: see dlock's package
// documentation, section Safety. If the gateway process dies, the leases
// it holds expire on the backend within their TTL, and their tokens are
// never granted again.
//
// # Watching and the dashboard
//
// GET /v1/watch streams the state of the keys under a prefix, and GET /
// serves a web page that shows them live from that stream. A browser's
// EventSource cannot send an Authorization header: the page opens its
// stream with a single-use stream ticket (POST /v1/stream-tickets)
// rather than a secret in the URL.
//
// # Security
//
// By default every request may do everything: serve it on loopback only.
// Beyond, serve it with TLS (the gateway is an http.Handler: give the
// http.Server a tls.Config, with ClientAuth and ClientCAs for client
// certificates) and authenticate with the Authenticate option: a
// Credentials file of bearer tokens, ClientCertificates, or a function of
// your own. Each Principal has Permissions per key prefix (lock:PREFIX,
// read:PREFIX, admin); a lease id is the capability to renew and release
// its lease only for a principal allowed on its key.
//
// # Limits
//
// Request bodies, leases held, waits in progress and the length of a long
// poll are bounded (see the Default constants and the Options); RateLimit
// and MaxStreamsPerClient bound each client's requests and streams.
package gateway

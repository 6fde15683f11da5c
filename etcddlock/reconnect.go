package etcddlock

import (
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// Reconnection after a network blip. gRPC's defaults wait up to 120 s
// between connection attempts (1 s growing by 1.6 at each failure, so
// about 17 s after seven failures: a server restart or a refused port for
// half a minute) and give a connection attempt that gets no answer 20 s
// before the next; meanwhile every request fails or waits, so a Client
// could not grant a lease for that long after the network came back.
const (
	// ReconnectMaxDelay bounds the wait between two connection attempts to
	// an endpoint: the network's return is noticed within it (plus 20%
	// jitter).
	ReconnectMaxDelay = time.Second
	// ReconnectAttemptTimeout bounds one connection attempt (TCP, TLS and
	// HTTP/2 handshakes) that gets no answer, as one made into the blip
	// does: then the next attempt starts. Long enough for a TLS handshake
	// over a slow link.
	ReconnectAttemptTimeout = 3 * time.Second
)

// reconnectParams is how Open's client reconnects (DialOptions).
var reconnectParams = grpc.ConnectParams{
	Backoff: grpcbackoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   ReconnectMaxDelay,
	},
	MinConnectTimeout: ReconnectAttemptTimeout,
}

// DialOptions returns the gRPC dial options of the etcd client that Open
// makes: reconnection bounded by ReconnectMaxDelay and
// ReconnectAttemptTimeout, so that a Client recovers within a few seconds
// of a network blip (docs/etcd.md, When the network blips). Add them to
// clientv3.Config.DialOptions of a client given to New for the same bound.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(reconnectParams)}
}

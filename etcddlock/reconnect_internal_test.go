package etcddlock

import (
	"testing"
	"time"
)

// The recovery bound that docs/etcd.md (When the network blips) states:
// after the network returns, a connection attempt starts within
// ReconnectMaxDelay plus 20% jitter, and one that gets no answer is
// abandoned after ReconnectAttemptTimeout.
func TestReconnectParams_bounded(t *testing.T) {
	b := reconnectParams.Backoff
	if b.MaxDelay != ReconnectMaxDelay || ReconnectMaxDelay > time.Second {
		t.Errorf("MaxDelay %v (ReconnectMaxDelay %v), want at most 1s", b.MaxDelay, ReconnectMaxDelay)
	}
	if b.Jitter > 0.2 || b.BaseDelay > b.MaxDelay || b.Multiplier < 1 {
		t.Errorf("backoff %+v: jitter above 20%% or base above max", b)
	}
	if reconnectParams.MinConnectTimeout != ReconnectAttemptTimeout || ReconnectAttemptTimeout > 3*time.Second {
		t.Errorf("MinConnectTimeout %v (ReconnectAttemptTimeout %v), want at most 3s", reconnectParams.MinConnectTimeout, ReconnectAttemptTimeout)
	}
	if len(DialOptions()) == 0 {
		t.Error("DialOptions is empty")
	}
}

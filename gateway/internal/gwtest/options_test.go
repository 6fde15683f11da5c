package gwtest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway"
)

func gatewayMaxLeases(n int) gateway.Option  { return gateway.MaxLeases(n) }
func gatewayMaxWaiters(n int) gateway.Option { return gateway.MaxWaiters(n) }
func gatewayTicketTTL(d time.Duration) gateway.Option {
	return gateway.TicketTTL(d)
}

func gatewayKeepAlive(d time.Duration) gateway.Option { return gateway.KeepAlive(d) }

func gatewayMaxBody(n int64) gateway.Option { return gateway.MaxBodyBytes(n) }

func escapePath(s string) string  { return (&url.URL{Path: s}).EscapedPath() }
func escapeQuery(s string) string { return url.QueryEscape(s) }

// TestNew_optionsOutOfRange: each bounded option refuses the value just
// below its bound with ErrInvalidOption, naming itself and both numbers,
// and takes the bound itself.
func TestNew_optionsOutOfRange(t *testing.T) {
	c, err := dlock.Open(context.Background(), "redis://"+redisAddr+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		below, at gateway.Option
		msg       string
	}{
		{gateway.MaxBodyBytes(1023), gateway.MaxBodyBytes(1024), "MaxBodyBytes 1023 is below 1024"},
		{gateway.MaxLeases(0), gateway.MaxLeases(1), "MaxLeases 0 is below 1"},
		{gateway.MaxWaiters(0), gateway.MaxWaiters(1), "MaxWaiters 0 is below 1"},
		{gateway.MaxWait(9 * time.Millisecond), gateway.MaxWait(10 * time.Millisecond), "MaxWait 9ms is below 10ms"},
		{gateway.TicketTTL(9 * time.Millisecond), gateway.TicketTTL(10 * time.Millisecond), "TicketTTL 9ms is below 10ms"},
		{gateway.KeepAlive(9 * time.Millisecond), gateway.KeepAlive(10 * time.Millisecond), "KeepAlive 9ms is below 10ms"},
		{gateway.MaxWatches(0), gateway.MaxWatches(1), "MaxWatches 0 is below 1"},
		{gateway.WatchListInterval(9 * time.Millisecond), gateway.WatchListInterval(10 * time.Millisecond), "WatchListInterval 9ms is below 10ms"},
		{gateway.MaxStreamsPerClient(0), gateway.MaxStreamsPerClient(1), "MaxStreamsPerClient 0 is below 1"},
	} {
		if _, err := gateway.New(c, tc.below); !errors.Is(err, gateway.ErrInvalidOption) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("New(%s): %v, want ErrInvalidOption saying %q", tc.msg, err, tc.msg)
		}
		gw, err := gateway.New(c, tc.at)
		if err != nil {
			t.Errorf("New at the bound of %s: %v", tc.msg, err)
			continue
		}
		if err := gw.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

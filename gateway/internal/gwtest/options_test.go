package gwtest

import (
	"net/url"
	"time"

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

package gwtest

import (
	"time"

	"github.com/dlockdev/dlock/gateway"
)

func gatewayMaxLeases(n int) gateway.Option  { return gateway.MaxLeases(n) }
func gatewayMaxWaiters(n int) gateway.Option { return gateway.MaxWaiters(n) }
func gatewayTicketTTL(d time.Duration) gateway.Option {
	return gateway.TicketTTL(d)
}

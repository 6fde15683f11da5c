package dlockotel

import (
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures New.
type Option func(*config) error

type config struct {
	tracers trace.TracerProvider
	meters  metric.MeterProvider
	keys    bool
}

func newConfig(opts []Option) (*config, error) {
	c := &config{}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	// The globals are read here, not at package init, so that a program
	// that sets them before New gets its own.
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	return c, nil
}

// WithTracerProvider makes the spans with tp's tracer instead of the global
// TracerProvider's (otel.GetTracerProvider at New). A nil tp is an error
// (ErrInvalidOption).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return fmt.Errorf("%w: WithTracerProvider(nil)", ErrInvalidOption)
		}
		c.tracers = tp
		return nil
	}
}

// WithMeterProvider records the metrics with mp's meter instead of the
// global MeterProvider's (otel.GetMeterProvider at New). A nil mp is an
// error (ErrInvalidOption).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: WithMeterProvider(nil)", ErrInvalidOption)
		}
		c.meters = mp
		return nil
	}
}

// WithKeyAttribute puts the lock's key on the spans, as dlock.key. Without
// it they leave the key out, since keys may name customers or orders. The
// metrics never carry the key, which would make a time series per key.
func WithKeyAttribute() Option {
	return func(c *config) error {
		c.keys = true
		return nil
	}
}

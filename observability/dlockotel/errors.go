package dlockotel

import "errors"

// ErrInvalidOption is returned by New, wrapped with the option, for an
// option given a value it cannot use (a nil provider).
var ErrInvalidOption = errors.New("dlockotel: invalid option")

// ErrInstrument is returned by New, wrapped with the instrument's name and
// the meter's error, when the MeterProvider refuses to create one of the
// metrics.
var ErrInstrument = errors.New("dlockotel: cannot create instrument")

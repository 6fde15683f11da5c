module github.com/dlockdev/dlock/httpfence/internal/redisproof

go 1.26.0

replace github.com/dlockdev/dlock => ../../..

replace github.com/dlockdev/dlock/httpfence => ../..

replace github.com/dlockdev/dlock/redisdlock => ../../../redisdlock

require (
	github.com/dlockdev/dlock v0.0.0-00010101000000-000000000000
	github.com/dlockdev/dlock/httpfence v0.0.0-00010101000000-000000000000
	github.com/dlockdev/dlock/redisdlock v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

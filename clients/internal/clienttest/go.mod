module github.com/dlockdev/dlock/clients/internal/clienttest

go 1.26.0

require (
	github.com/dlockdev/dlock v0.1.0
	github.com/dlockdev/dlock/gateway v0.1.0
	github.com/dlockdev/dlock/httpfence v0.1.0
	github.com/dlockdev/dlock/redisdlock v0.1.0
)

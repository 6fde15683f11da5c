module github.com/dlockdev/dlock/gateway

go 1.26.0

require github.com/dlockdev/dlock v0.1.0

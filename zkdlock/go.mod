module github.com/dlockdev/dlock/zkdlock

go 1.26.0

replace github.com/dlockdev/dlock => ..

require (
	github.com/dlockdev/dlock v0.0.0-00010101000000-000000000000
	github.com/go-zookeeper/zk v1.0.4
)

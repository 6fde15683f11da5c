module github.com/dlockdev/dlock/zkdlock

go 1.26.0

require (
	github.com/dlockdev/dlock v0.1.0
	github.com/go-zookeeper/zk v1.0.4
)

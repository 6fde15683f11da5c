package driver

// Named is implemented by drivers that say which lock service they speak
// to. dlock.NewClient asks once, and its Hooks report the name as Backend.
type Named interface {
	// Backend returns the service's name, short and fixed: "redis",
	// "zookeeper", "etcd", "mem".
	Backend() string
}

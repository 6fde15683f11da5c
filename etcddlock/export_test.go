package etcddlock

// QueueDirForTest returns the etcd key prefix of the entries of key.
func QueueDirForTest(prefix, key string) string {
	return (&etcdDriver{prefix: prefix}).queueDir(key)
}

package redisdlock

// RedisKeyForTest returns the Redis key of a lock's hash.
func RedisKeyForTest(prefix, key string) string {
	return prefix + "{" + escapeKey(key) + "}"
}

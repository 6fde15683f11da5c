package zkdlock

// KeyPathForTest returns the node of key under root.
func KeyPathForTest(root, key string) string { return root + "/" + escapeKey(key) }

// EscapeKeyForTest and UnescapeKeyForTest expose the key mapping.
var (
	EscapeKeyForTest   = escapeKey
	UnescapeKeyForTest = unescapeKey
)

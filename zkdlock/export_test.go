package zkdlock

// KeyPathForTest returns the node of key under root.
func KeyPathForTest(root, key string) string { return root + "/" + escapeKey(key) }

// EscapeKeyForTest and UnescapeKeyForTest expose the key mapping.
var (
	EscapeKeyForTest   = escapeKey
	UnescapeKeyForTest = unescapeKey
)

// SetListAskHookForTest makes f run whenever an attempt asks for a listing
// of a key's queue (nil: stop).
func SetListAskHookForTest(f func(keyPath string)) {
	if f == nil {
		onListAsk.Store(nil)
		return
	}
	onListAsk.Store(&f)
}

// DelayIndexForTest returns the node under root that indexes the
// lock-delay marks.
func DelayIndexForTest(root string) string { return root + "/" + indexName }

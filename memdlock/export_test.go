package memdlock

// NamedSpacesForTest returns how many named spaces the registry keeps.
func NamedSpacesForTest() int {
	namedMu.Lock()
	defer namedMu.Unlock()
	return len(named)
}

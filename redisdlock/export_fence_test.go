package redisdlock

// HashSlotForTest is the Cluster slot a fenced write computes for key.
func HashSlotForTest(key string) int { return hashSlot(key) }

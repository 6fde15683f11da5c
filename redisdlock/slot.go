package redisdlock

import (
	"strconv"
	"strings"
	"sync"
)

// hashTag returns the part of a Redis key that decides its Cluster slot, by
// the Cluster specification's rule: the bytes between the first '{' and the
// first '}' after it, when there are any; otherwise the whole key. (A Ring
// shards by the same part.)
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// hasHashTag reports whether key has a hash tag of its own.
func hasHashTag(key string) bool { return hashTag(key) != key }

// hashSlot returns the Redis Cluster slot of key: CRC16-XMODEM of its hash
// tag, modulo 16384. It is computed here rather than asked of the server
// (CLUSTER KEYSLOT) because a fenced write checks it before sending anything;
// TestHashSlot_matchesServer compares it with a real Cluster's answers.
func hashSlot(key string) int { return tagSlot(hashTag(key)) }

// tagSlot returns the Cluster slot of the keys whose hash tag is tag.
func tagSlot(tag string) int {
	var crc uint16
	for _, b := range []byte(tag) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// slotTags holds, for every Cluster slot, the smallest decimal number whose
// CRC16 maps to it: the hash tag of that slot's token record and release
// trace (keys.go), which must share the slot of every lock key whose tokens
// they keep. Built on first use (≈ 110,000 CRC16s, about a millisecond);
// 64 KB.
var slotTags = sync.OnceValue(func() *[16384]uint32 {
	var tags [16384]uint32
	var found [16384]bool
	for n, left := uint32(0), len(tags); left > 0; n++ {
		if s := hashSlot(strconv.FormatUint(uint64(n), 10)); !found[s] {
			tags[s], found[s] = n, true
			left--
		}
	}
	return &tags
})

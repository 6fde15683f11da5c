package dlocktest

import (
	"fmt"
	"sync"

	"github.com/dlockdev/dlock"
)

// sharedResource is the protected resource of the safety scenarios of
// semaphores and read-write locks: it records critical sections that
// overlap more than the key's kind allows, and fencing tokens that break
// the rules a fenced resource of shared leases can rely on.
//
// Shared holders granted together enter in any order, so their tokens do
// not reach the resource in increasing order. What holds is what a fenced
// resource of shared leases can check: an
// Exclusive holder's token is above every token seen before it (every
// earlier holder was granted before it, since it waited for them to leave),
// a Shared holder's is above the last Exclusive holder's, and no two
// grants share a token.
type sharedResource struct {
	limit int // most Shared holders inside at once; 0: no limit

	mu            sync.Mutex
	shared        int    // Shared holders inside
	exclusive     int    // Exclusive holders inside
	maxToken      uint64 // highest token seen
	lastExclusive uint64 // token of the last Exclusive holder to enter
	tokens        map[uint64]string
	problems      []string
	entries       int
}

func newSharedResource(limit int) *sharedResource {
	return &sharedResource{limit: limit, tokens: map[uint64]string{}}
}

// enter records the start of a critical section by who, holding a lease
// of mode with token.
func (r *sharedResource) enter(who string, mode dlock.Mode, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries++
	if prev, dup := r.tokens[token]; dup {
		r.problems = append(r.problems, fmt.Sprintf("%s entered with token %d, already given to %s", who, token, prev))
	}
	r.tokens[token] = who
	switch mode {
	case dlock.Exclusive:
		if r.shared > 0 || r.exclusive > 0 {
			r.problems = append(r.problems, fmt.Sprintf("%s entered as a writer (token %d) while %d readers and %d writers were inside", who, token, r.shared, r.exclusive))
		}
		if token <= r.maxToken {
			r.problems = append(r.problems, fmt.Sprintf("%s entered as a writer with token %d, not above %d seen before", who, token, r.maxToken))
		}
		r.exclusive++
		r.lastExclusive = token
	default:
		if r.exclusive > 0 {
			r.problems = append(r.problems, fmt.Sprintf("%s entered shared (token %d) while a writer was inside", who, token))
		}
		if r.limit > 0 && r.shared >= r.limit {
			r.problems = append(r.problems, fmt.Sprintf("%s entered (token %d) while %d of %d permits were in use", who, token, r.shared, r.limit))
		}
		if token <= r.lastExclusive {
			r.problems = append(r.problems, fmt.Sprintf("%s entered shared with token %d, not above the last writer's %d", who, token, r.lastExclusive))
		}
		r.shared++
	}
	r.maxToken = max(r.maxToken, token)
}

// exit records the end of a critical section of mode.
func (r *sharedResource) exit(mode dlock.Mode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mode == dlock.Exclusive {
		r.exclusive--
	} else {
		r.shared--
	}
}

func (r *sharedResource) report() (entries int, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries, append([]string(nil), r.problems...)
}

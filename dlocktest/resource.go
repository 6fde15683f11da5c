package dlocktest

import (
	"fmt"
	"sync"
)

// fencedResource is the protected resource of the mutual-exclusion tests: it
// records overlapping critical sections and writes whose fencing token is not
// above the highest one seen.
type fencedResource struct {
	mu       sync.Mutex
	inside   int    // holders currently in their critical section
	maxToken uint64 // highest token accepted
	problems []string
	writes   int
}

// enter records the start of a critical section by a holder of token.
func (r *fencedResource) enter(who string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inside++
	if r.inside > 1 {
		r.problems = append(r.problems, fmt.Sprintf("%s entered (token %d) while another holder was inside", who, token))
	}
	if token <= r.maxToken {
		r.problems = append(r.problems, fmt.Sprintf("%s wrote with token %d, not above %d", who, token, r.maxToken))
	} else {
		r.maxToken = token
	}
	r.writes++
}

func (r *fencedResource) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inside--
}

func (r *fencedResource) report() (writes int, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes, append([]string(nil), r.problems...)
}

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

// finishContenders waits for the contenders of wg, then fails the test (not
// fatally) with every error they sent on errs and every problem report
// found in the shared resource; it returns report's count of critical
// sections. The contention tests of locks, semaphores and elections end
// with it.
func (s *suite) finishContenders(wg *sync.WaitGroup, errs chan error, report func() (int, []string)) int {
	s.t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Error(err)
	}
	n, problems := report()
	for _, p := range problems {
		s.t.Error(p)
	}
	return n
}

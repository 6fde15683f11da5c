package memdlock

import "sync"

// The spaces that mem://NAME URLs name, for as long as a client uses them
// or a lease in them lives: the one piece of package state, as dlock's
// scheme registry, so that clients opened by URL in one process meet.
var (
	namedMu sync.Mutex
	named   = map[string]*space{}
)

// join returns the space of that name with one more client, creating it
// with clock if there is none. An empty name is a space of its own.
func join(name string, clock *Clock) (*space, error) {
	if name == "" {
		s := newSpace("", clock)
		s.clients = 1
		return s, nil
	}
	namedMu.Lock()
	defer namedMu.Unlock()
	s := named[name]
	if s == nil {
		s = newSpace(name, clock)
		named[name] = s
	} else if clock != nil && s.clock != clock {
		return nil, ErrClockDiffers
	}
	s.mu.Lock()
	s.clients++
	s.mu.Unlock()
	return s, nil
}

// leave takes one client off s.
func (s *space) leave() {
	s.mu.Lock()
	s.clients--
	s.mu.Unlock()
	s.forgetIfUnused()
}

// forgetIfUnused drops s from the registry once no client uses it and no
// lease lives in it, so that names used once cost nothing afterwards.
func (s *space) forgetIfUnused() {
	if s.name == "" {
		return
	}
	namedMu.Lock()
	defer namedMu.Unlock()
	s.mu.Lock()
	unused := s.clients == 0 && len(s.keys) == 0
	s.mu.Unlock()
	if unused && named[s.name] == s {
		delete(named, s.name)
	}
}

package etcddlock

import (
	"errors"
	"testing"
	"time"
)

// A grant makes its Lost channel when first asked or at the loss: a loss
// before anybody asked is still received, and one after is too.
func TestGrant_lostChannelMadeLazily_receivesEitherOrder(t *testing.T) {
	gone := errors.New("gone")
	before := &grant{}
	before.lose(gone)
	after := &grant{}
	lost := after.Lost()
	after.lose(gone)
	for name, ch := range map[string]<-chan error{"lost before Lost": before.Lost(), "lost after Lost": lost} {
		select {
		case err := <-ch:
			if !errors.Is(err, gone) {
				t.Errorf("%s: received %v, want %v", name, err, gone)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: nothing received", name)
		}
	}
}

package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
)

func TestOpen_unknownScheme(t *testing.T) {
	_, err := dlock.Open(context.Background(), "memcache://127.0.0.1:11211")
	if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), `"memcache"`) || !strings.Contains(err.Error(), "redis") {
		t.Fatalf("err = %v, want ErrInvalidURL naming the scheme and the registered ones", err)
	}
}

func TestOpen_unparsableURLHidesPassword(t *testing.T) {
	_, err := dlock.Open(context.Background(), "redis://me:hunter2@[::1")
	if !errors.Is(err, dlock.ErrInvalidURL) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v, want ErrInvalidURL without the password", err)
	}
}

func TestRegisterScheme_twicePanics(t *testing.T) {
	dlock.RegisterScheme("dlocktest-twice", nil)
	defer func() {
		if recover() == nil {
			t.Fatal("registering dlocktest-twice:// twice did not panic")
		}
	}()
	dlock.RegisterScheme("dlocktest-twice", nil)
}

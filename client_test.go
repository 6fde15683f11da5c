package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
)

func TestOpen_unknownScheme(t *testing.T) {
	_, err := dlock.Open(context.Background(), "memcache://127.0.0.1:11211")
	if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), `"memcache"`) || !strings.Contains(err.Error(), "registered schemes: mem") {
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

// TestOpen_invalidURLHidesSecrets: Open names a URL the driver refused with
// its password and password-like parameters hidden (a redis+sentinel URL's
// sentinel_password showed), and quotes no part of an invalid escape, which
// may be in the password.
func TestOpen_invalidURLHidesSecrets(t *testing.T) {
	dlock.RegisterScheme("dlocktest-badurl", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		return nil, fmt.Errorf("%w: unknown option %q", driver.ErrInvalidURL, "colour")
	})
	_, err := dlock.Open(context.Background(), "dlocktest-badurl://me:hunter2@h:1/m?sentinel_password=hunter2&colour=blue&Auth_Token=hunter2")
	want := `open "dlocktest-badurl://me:xxxxx@h:1/m?sentinel_password=xxxxx&colour=blue&Auth_Token=xxxxx": dlock: invalid backend URL: unknown option "colour"`
	if !errors.Is(err, dlock.ErrInvalidURL) || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	_, err = dlock.Open(context.Background(), "dlocktest-badurl://me:hun%zzter2@h:1")
	if !errors.Is(err, dlock.ErrInvalidURL) || strings.Contains(err.Error(), "zz") || !strings.Contains(err.Error(), "cannot parse: invalid URL escape") {
		t.Errorf("err = %v, want ErrInvalidURL without the escape", err)
	}
	_, err = dlock.Open(context.Background(), "dlocktest-badurl://")
	if want := `open "dlocktest-badurl://": `; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want it to start with %s", err, want)
	}
}

package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	good := []string{"order", "orders/close-expired", "a{b}c", "..", "/", "ключ", strings.Repeat("k", MaxLen)}
	for _, k := range good {
		if err := Validate(k); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", k, err)
		}
	}
	bad := map[string]string{
		"":                            "empty",
		strings.Repeat("k", MaxLen+1): "limit is 256",
		"a\nb":                        "control character",
		"a\x00b":                      "control character",
		"\xff":                        "UTF-8",
	}
	for k, want := range bad {
		err := Validate(k)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%q) = %v, want ErrInvalid mentioning %q", k, err, want)
		}
	}
	if err := ValidatePrefix(""); err != nil {
		t.Errorf("ValidatePrefix(\"\") = %v", err)
	}
}

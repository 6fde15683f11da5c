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
		"a\nb":                        "control character U+000A at byte 1",
		"a\x00b":                      "control character U+0000 at byte 1",
		"\xff":                        "UTF-8",
	}
	for k, want := range bad {
		err := Validate(k)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%q) = %v, want ErrInvalid mentioning %q", k, err, want)
		}
	}
	if got, want := Quote(strings.Repeat("k", MaxLen)), `"`+strings.Repeat("k", MaxLen)+`"`; got != want {
		t.Errorf("Quote of a valid key = %s, want it whole", got)
	}
	if got, want := Quote(strings.Repeat("k", MaxLen+1)), `"`+strings.Repeat("k", 32)+`…"`; got != want {
		t.Errorf("Quote of a key too long = %s, want %s", got, want)
	}
	if err := ValidatePrefix(""); err != nil {
		t.Errorf("ValidatePrefix(\"\") = %v", err)
	}
}

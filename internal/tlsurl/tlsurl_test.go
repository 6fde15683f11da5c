package tlsurl

import (
	"net/url"
	"strings"
	"testing"
)

func TestConfig_refusals(t *testing.T) {
	for q, want := range map[string]string{
		"cacert=/tmp/ca.pem": `parameter "cacert" is for TLS: use rediss://`,
	} {
		v, _ := url.ParseQuery(q)
		if _, err := Config(false, "rediss", v); err == nil || err.Error() != want {
			t.Errorf("%s without TLS: %v, want %q", q, err, want)
		}
	}
	for q, want := range map[string]string{
		"cacert=/does/not/exist": "cacert: open /does/not/exist",
		"cert=/tmp/c.pem":        "needs both cert= and key=",
		"key=/tmp/k.pem":         "needs both cert= and key=",
	} {
		v, _ := url.ParseQuery(q)
		if _, err := Config(true, "rediss", v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", q, err, want)
		}
	}
	v, _ := url.ParseQuery("server_name=db.internal")
	if c, err := Config(true, "rediss", v); err != nil || c.ServerName != "db.internal" || c.RootCAs != nil {
		t.Errorf("server_name only: %+v, %v", c, err)
	}
	if c, err := Config(false, "rediss", url.Values{}); c != nil || err != nil {
		t.Errorf("no TLS, no parameters: %v, %v", c, err)
	}
}

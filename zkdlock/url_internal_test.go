package zkdlock

import (
	"net/url"
	"slices"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]urlConfig{
		"zk://h1":          {servers: []string{"h1:2181"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout},
		"zk://h1,h2:2182/": {servers: []string{"h1:2181", "h2:2182"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout},
		"zk://u:p%40ss@h1:2181/app/locks?session_timeout=3s&connect_timeout=1m": {servers: []string{"h1:2181"}, root: "/app/locks", sessionTimeout: 3 * time.Second, connectTimeout: time.Minute, user: "u", password: "p@ss"},
		"zk://h1?tick_time=2s":                  {servers: []string{"h1:2181"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout, tickTime: 2 * time.Second},
		"zk://h1?standalone=true":               {servers: []string{"h1:2181"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout, deployment: Standalone},
		"zk://h1?standalone=0":                  {servers: []string{"h1:2181"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout, deployment: Ensemble},
		"zk://h1?standalone=false&tick_time=2s": {servers: []string{"h1:2181"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout, tickTime: 2 * time.Second, deployment: Ensemble},
		"zk://h1?lock_delay_sweep=10s":          {servers: []string{"h1:2181"}, root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout, lockDelaySweep: 10 * time.Second},
	} {
		if want.lockDelaySweep == 0 {
			want.lockDelaySweep = DefaultLockDelaySweep
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseURL(u)
		if err != nil {
			t.Errorf("parseURL(%q): %v", raw, err)
			continue
		}
		if !slices.Equal(got.servers, want.servers) || got.root != want.root || got.sessionTimeout != want.sessionTimeout ||
			got.connectTimeout != want.connectTimeout || got.user != want.user || got.password != want.password ||
			got.tickTime != want.tickTime || got.deployment != want.deployment || got.lockDelaySweep != want.lockDelaySweep {
			t.Errorf("parseURL(%q) = %+v, want %+v", raw, got, want)
		}
	}
}

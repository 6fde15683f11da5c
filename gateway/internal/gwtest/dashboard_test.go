package gwtest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"image/png"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/gateway"
)

// The screenshot in the docs is this test's page: scripts/gateway-dashboard.sh
// runs it with -dashboard-png to render it again.
var dashboardPNG = flag.String("dashboard-png", "", "write the dashboard's screenshot to this file (scripts/gateway-dashboard.sh)")

// The size of docs/gateway-dashboard.png.
const shotWidth, shotHeight = 1200, 720

// pageView is what the dashboard shows, read from its DOM.
type pageView struct {
	State string    `json:"state"`
	Empty bool      `json:"empty"`
	Keys  []pageKey `json:"keys"`
}

type pageKey struct {
	Key     string   `json:"key"`
	Kind    string   `json:"kind"`
	Holders []string `json:"holders"` // each holder's text
	TTLs    []string `json:"ttls"`    // each holder's time left, as shown
	Waiters []string `json:"waiters"` // each waiter's text, in the page's order
	Usage   string   `json:"usage"`
	Leader  string   `json:"leader"`
}

const readPage = `JSON.stringify({
  state: document.body.dataset.state,
  empty: !document.getElementById('empty').hidden,
  keys: [...document.querySelectorAll('section.key')].map(s => ({
    key: s.dataset.key,
    kind: s.dataset.kind,
    holders: [...s.querySelectorAll('li.holder')].map(li => li.textContent),
    ttls: [...s.querySelectorAll('li.holder .ttl')].map(t => t.textContent),
    waiters: [...s.querySelectorAll('li.waiter')].map(li => li.textContent),
    usage: s.querySelector('.usage')?.textContent ?? '',
    leader: s.querySelector('.leader')?.textContent ?? '',
  })),
})`

func (v pageView) key(name string) pageKey {
	for _, k := range v.Keys {
		if k.Key == name {
			return k
		}
	}
	return pageKey{}
}

// waitPage reads the page until cond holds of what it shows, at most waitFor.
func waitPage(t *testing.T, b *browser, what string, cond func(pageView) bool) pageView {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	var v pageView
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		var raw string
		err := b.eval(readPage, &raw)
		if err == nil {
			v = pageView{}
			err = json.Unmarshal([]byte(raw), &v)
		}
		if err == nil && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard did not show %s within %v (%v); it shows %+v", what, waitFor, err, v)
		}
		time.Sleep(delay) // polling the page's DOM, which sends us no event
	}
}

// holds reports whether each of texts has the matching substring of wants,
// and there are as many.
func holds(texts []string, wants ...string) bool {
	if len(texts) != len(wants) {
		return false
	}
	for i, w := range wants {
		if !strings.Contains(texts[i], w) {
			return false
		}
	}
	return true
}

func seconds(s string) float64 {
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, " s"), 64)
	if err != nil {
		return -1
	}
	return f
}

// TestDashboard_showsAndFollowsTheKeys loads the dashboard in a real
// headless Chromium in front of a gateway on Redis, with locks, permits
// and an election taken through the library, and checks what the page
// shows: holders with their time left counting down, waiters in order,
// the semaphore's usage, the leader; then that it follows a hand-off.
func TestDashboard_showsAndFollowsTheKeys(t *testing.T) {
	e := newEnv(t, gateway.WatchListInterval(100*time.Millisecond))
	if *dashboardPNG != "" {
		e.Prefix = "shop/" // short keys in the picture
	}
	s := newScene(e)
	b := startBrowser(t, shotWidth, shotHeight)
	b.navigate(e.Srv.URL + "/?prefix=" + escapeQuery(e.Prefix))

	v := waitPage(t, b, "the three keys", func(v pageView) bool {
		return v.State == "live" && len(v.Keys) == 3 && len(v.key(s.orders).TTLs) == 1 && v.key(s.orders).TTLs[0] != ""
	})
	orders, reports, sched := v.key(s.orders), v.key(s.reports), v.key(s.scheduler)
	token := strconv.FormatUint(s.ordersLease.Token(), 10)
	if orders.Kind != "lock" || !holds(orders.Holders, "#"+token+" app-1 · pid 4242 · worker-a") || !holds(orders.Waiters, "worker-b", "worker-c") {
		t.Errorf("orders: %+v, want worker-a holding with token %s, then worker-b and worker-c waiting in order", orders, token)
	}
	if ttl := seconds(orders.TTLs[0]); ttl <= 0 || ttl > 30 {
		t.Errorf("orders' holder shows %q left, want a time within its 30 s TTL", orders.TTLs[0])
	}
	if reports.Kind != "semaphore" || reports.Usage != "2 / 3 permits" || !holds(reports.Holders, "report-", "report-") {
		t.Errorf("reports: %+v, want 2 of 3 permits held", reports)
	}
	if sched.Kind != "election" || sched.Leader != "10.0.0.7:8080" || !holds(sched.Waiters, "10.0.0.8:8080") {
		t.Errorf("scheduler: %+v, want 10.0.0.7:8080 leading, 10.0.0.8:8080 waiting", sched)
	}
	// The time left counts down in the page, between events.
	first := seconds(orders.TTLs[0])
	waitPage(t, b, "worker-a's time left counting down", func(v pageView) bool {
		k := v.key(s.orders)
		return len(k.TTLs) == 1 && seconds(k.TTLs[0]) > 0 && seconds(k.TTLs[0]) < first
	})
	if *dashboardPNG != "" {
		if err := os.WriteFile(*dashboardPNG, b.screenshot(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", *dashboardPNG)
	}

	s.handOff()
	waitPage(t, b, "worker-b holding, worker-c waiting, 10.0.0.8:8080 leading", func(v pageView) bool {
		o, sc := v.key(s.orders), v.key(s.scheduler)
		return holds(o.Holders, "worker-b") && holds(o.Waiters, "worker-c") &&
			sc.Leader == "10.0.0.8:8080" && len(sc.Waiters) == 0
	})

	// The stream cut, the page reconnects with a new stream ticket (the
	// one it opened the stream with is spent) and follows on: keys released
	// by all leave the page.
	e.Srv.CloseClientConnections()
	s.releaseWaiters()
	waitPage(t, b, "orders and scheduler gone, reports left", func(v pageView) bool {
		return v.State == "live" && len(v.Keys) == 1 && v.Keys[0].Key == s.reports
	})
}

// TestDashboard_servedAsIs checks the page's routes: the page and its two
// files, under a policy that lets it load nothing from elsewhere.
func TestDashboard_servedAsIs(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/", "/dashboard/dashboard.js", "/dashboard/dashboard.css"} {
		r := e.do(context.Background(), http.MethodGet, path, nil)
		if r.Status != http.StatusOK || !strings.Contains(r.Header.Get("Content-Security-Policy"), "default-src 'none'") || len(r.Raw) == 0 {
			t.Errorf("GET %s: %d, CSP %q", path, r.Status, r.Header.Get("Content-Security-Policy"))
		}
		if strings.Contains(r.Raw, "http://") || strings.Contains(r.Raw, "https://") {
			t.Errorf("GET %s refers to another site", path)
		}
	}
	e.want(e.do(context.Background(), http.MethodGet, "/dashboard/nothing.js", nil), http.StatusNotFound, gateway.CodeNotFound)
	e.want(e.do(context.Background(), http.MethodGet, "/nothing", nil), http.StatusNotFound, gateway.CodeNotFound)
}

// TestDashboard_screenshotInDocs is the cheap drift check of
// docs/gateway-dashboard.png: a PNG of the size the test renders.
func TestDashboard_screenshotInDocs(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/gateway-dashboard.png")
	if err != nil {
		t.Fatalf("%v: render it with scripts/gateway-dashboard.sh", err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(raw))
	if err != nil || cfg.Width != shotWidth || cfg.Height != shotHeight {
		t.Fatalf("docs/gateway-dashboard.png: %dx%d (%v), want %dx%d: render it again with scripts/gateway-dashboard.sh", cfg.Width, cfg.Height, err, shotWidth, shotHeight)
	}
}

// TestDashboard_asksForAToken: with authentication on, the page asks for a
// bearer token when its ticket request gets 401, keeps it in
// sessionStorage (not in its URL), asks again after a wrong one, and then
// shows what the token's principal may read.
func TestDashboard_asksForAToken(t *testing.T) {
	e := newAuthEnv(t, gateway.WatchListInterval(100*time.Millisecond))
	key := e.Key("orders/1")
	e.want(e.as(tokOrders).acquire(map[string]any{"key": key, "ttl_ms": 30000}), http.StatusOK, "")
	b := startBrowser(t, shotWidth, shotHeight)
	b.navigate(e.Srv.URL + "/?prefix=" + escapeQuery(e.Key("orders/")))

	submit := func(token string) {
		t.Helper()
		js := `(() => { document.getElementById('token').value = ` + strconv.Quote(token) + `; document.getElementById('login').requestSubmit(); return 'ok'; })()`
		var out string
		if err := b.eval(js, &out); err != nil {
			t.Fatal(err)
		}
	}
	loginShown := `document.body.dataset.state === 'login' && !document.getElementById('login').hidden ? 'login' : document.body.dataset.state`
	waitLogin := func(what string) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for delay := 10 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
			var state string
			if err := b.eval(loginShown, &state); err == nil && state == "login" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page did not ask for a token %s within %v", what, waitFor)
			}
			time.Sleep(delay) // polling the page's DOM, which sends us no event
		}
	}
	waitLogin("at first")
	submit("wrong-token-0123456789abcdef")
	waitLogin("again after a wrong one")
	submit(tokOrders)
	waitPage(t, b, "the key its token may read", func(v pageView) bool {
		return v.State == "live" && len(v.Keys) == 1 && v.Keys[0].Key == key
	})
	var where string
	if err := b.eval(`location.href + ' ' + sessionStorage.getItem('dlock-gateway-token')`, &where); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Fields(where)[0], tokOrders) || !strings.HasSuffix(where, " "+tokOrders) {
		t.Fatalf("page URL and stored token: %q, want the token in sessionStorage only", where)
	}
}

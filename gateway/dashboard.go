package gateway

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard is three static files, embedded: no build step, and
// nothing fetched from elsewhere (the machines running a gateway may have
// no internet access). The page reads GET /v1/watch with EventSource.
//
//go:embed dashboard
var dashboardFS embed.FS

// dashboardCSP lets the page load only its own files and talk only to the
// gateway that served it; keys and metadata are shown as text, never as
// markup, but a policy keeps a mistake there from running anything.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// serveDashboard: GET / is the dashboard's page.
func serveDashboard(w http.ResponseWriter, r *http.Request) {
	serveDashboardAsset(w, r, "index.html")
}

// serveDashboardFile: GET /dashboard/{file} are the page's script and
// style sheet.
func serveDashboardFile(w http.ResponseWriter, r *http.Request) {
	serveDashboardAsset(w, r, r.URL.Path[len("/dashboard/"):])
}

func serveDashboardAsset(w http.ResponseWriter, r *http.Request, name string) {
	sub, _ := fs.Sub(dashboardFS, "dashboard") // cannot fail: a literal, embedded directory
	if _, err := fs.Stat(sub, name); err != nil || name == "" {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no route %s", r.URL.Path))
		return
	}
	w.Header().Set("Content-Security-Policy", dashboardCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeFileFS(w, r, sub, name)
}

package gateway

import (
	"net/http"
	"time"
)

// handleInspect: GET /v1/keys/{key...} says who holds the key and who
// waits for it, in order.
func (g *Gateway) handleInspect(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	if err := allow(r, ActionRead, r.PathValue("key")); err != nil {
		writeError(w, err)
		return
	}
	info, err := g.client.Inspect(r.Context(), r.PathValue("key"))
	if err != nil {
		writeError(w, fromLibrary(err))
		return
	}
	_ = writeJSON(w, http.StatusOK, struct {
		infoReply
		ReceivedAt string `json:"received_at"`
	}{infoOf(info), stamp(recv)})
}

// handleList: GET /v1/keys?prefix=P lists the keys held or waited for.
func (g *Gateway) handleList(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	if err := allowPrefix(r, ActionRead, r.URL.Query().Get("prefix")); err != nil {
		writeError(w, err)
		return
	}
	infos, err := g.client.List(r.Context(), r.URL.Query().Get("prefix"))
	if err != nil {
		writeError(w, fromLibrary(err))
		return
	}
	out := make([]infoReply, len(infos))
	for i, in := range infos {
		out[i] = infoOf(in)
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Keys       []infoReply `json:"keys"`
		ReceivedAt string      `json:"received_at"`
	}{out, stamp(recv)})
}

package gwtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// browser is a headless Chromium driven through the DevTools protocol
// over --remote-debugging-pipe: JSON messages ended by a NUL byte, written
// to Chromium's fd 3 and read from its fd 4. That needs no websocket, so
// the standard library is enough.
type browser struct {
	t        *testing.T
	cmd      *exec.Cmd
	toChrome io.WriteCloser
	session  string // the page's, from Target.attachToTarget

	mu      sync.Mutex
	seq     int
	replies map[int]chan cdpReply // guarded by mu
	readErr error                 // why reading stopped; guarded by mu
	done    chan struct{}         // closed when the reader stops
}

type cdpReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// chromiumBin is the browser the dashboard's tests run: DLOCK_CHROMIUM_BIN,
// or Debian's chromium on the PATH. Missing, the tests are skipped, except
// in CI (CI=true), where that is a failure: test.sh installs it.
func chromiumBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DLOCK_CHROMIUM_BIN"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	const hint = "no chromium on the PATH: install Debian's (apt-get install chromium) or set DLOCK_CHROMIUM_BIN"
	if os.Getenv("CI") == "true" {
		t.Fatal(hint)
	}
	t.Skip(hint)
	return ""
}

// startBrowser starts a headless Chromium with a page of width×height
// pixels, and stops it when the test ends.
func startBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	toChrome, chromeIn, err := os.Pipe() // Chromium reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe() // and writes fd 4
	if err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--headless", "--remote-debugging-pipe", "--user-data-dir=" + t.TempDir(),
		"--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--font-render-hinting=none",
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses to run as root with its sandbox
	}
	cmd := exec.Command(chromiumBin(t), args...)
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	cmd.Stderr = &logWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &browser{t: t, cmd: cmd, toChrome: chromeIn, replies: map[int]chan cdpReply{}, done: make(chan struct{})}
	go b.read(chromeOut)
	t.Cleanup(func() {
		// Browser.close, then the end of its process (and so of the pipe
		// the reader reads): bounded, then killed.
		_, _ = b.call("", "Browser.close", nil)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(waitFor):
			_ = cmd.Process.Kill()
			<-exited
		}
		chromeIn.Close()
		<-b.done
		chromeOut.Close()
	})

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.must("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.must("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.must(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

// read dispatches Chromium's replies to their calls; events are dropped.
func (b *browser) read(r io.Reader) {
	defer close(b.done)
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.replies {
				close(ch)
				delete(b.replies, id)
			}
			b.mu.Unlock()
			return
		}
		var rep cdpReply
		if json.Unmarshal(msg[:len(msg)-1], &rep) != nil || rep.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.replies[rep.ID]
		delete(b.replies, rep.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

// call sends one command (to the page's session, or to the browser for
// session "") and waits for its reply, at most waitFor.
func (b *browser) call(session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: chromium is gone: %v", method, b.readErr)
	}
	b.seq++
	id := b.seq
	ch := make(chan cdpReply, 1)
	b.replies[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, _ := json.Marshal(msg) // cannot fail: maps of strings and numbers
	if _, err := b.toChrome.Write(append(raw, 0)); err != nil {
		return nil, fmt.Errorf("%s: %v", method, err)
	}
	select {
	case rep, ok := <-ch:
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: chromium is gone", method)
		case rep.Error != nil:
			return nil, fmt.Errorf("%s: %s", method, rep.Error.Message)
		}
		return rep.Result, nil
	case <-time.After(waitFor):
		return nil, fmt.Errorf("%s: no reply within %v", method, waitFor)
	}
}

func (b *browser) must(session, method string, params, out any) {
	b.t.Helper()
	res, err := b.call(session, method, params)
	if err != nil {
		b.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
	}
}

func (b *browser) navigate(url string) {
	b.t.Helper()
	b.must(b.session, "Page.navigate", map[string]any{"url": url}, nil)
}

// eval runs a JavaScript expression in the page and decodes its value,
// which must be JSON-serialisable, into out.
func (b *browser) eval(expr string, out any) error {
	res, err := b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return errors.New("javascript: " + r.Exception.Text)
	}
	return json.Unmarshal(r.Result.Value, out)
}

// screenshot returns the page as a PNG.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var shot struct {
		Data []byte `json:"data"` // base64 in JSON: encoding/json decodes it
	}
	b.must(b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	return shot.Data
}

// logWriter passes Chromium's log to the test's, a line at a time.
type logWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Logf("chromium: %s", w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

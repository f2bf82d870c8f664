package ui

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	"github.com/firnid/firn/internal/testing/freeport"
)

const (
	chromiumPath = "/usr/bin/chromium"
	artifactDir  = "../artifacts"
	maxLead      = time.Second
	// The step is far beyond max-lead so that the node stays down until the
	// offset is cleared (it would recover by itself once the clock caught
	// up, about step - max-lead later): what brings it back is the clear.
	step = 30 * time.Second
)

func freePort(t *testing.T) int {
	t.Helper()
	return freeport.Port(t)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(u string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// startNode builds cmd/firn and runs one node on its embedded etcd with
// fault injection on; it returns the HTTP and fault listener addresses.
func startNode(t *testing.T) (httpAddr, faultAddr string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "firn")
	build := exec.Command("go", "build", "-o", bin, "github.com/firnid/firn/cmd/firn")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/firn: %v\n%s", err, out)
	}
	httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	faultAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "serve",
		"--data-dir", t.TempDir(),
		"--grpc-addr", "127.0.0.1:0",
		"--http-addr", httpAddr,
		"--embedded-client-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--embedded-peer-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--max-lead", maxLead.String(),
		"--enable-fault-injection", "--fault-addr", faultAddr)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("firn output:\n%s", out)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, err := get("http://" + httpAddr + "/readyz"); err == nil && code == 200 {
			return httpAddr, faultAddr
		}
		select {
		case <-done:
			t.Fatalf("firn serve exited:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("firn serve not ready after 30s:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func setOffset(t *testing.T, faultAddr string, d time.Duration) {
	t.Helper()
	resp, err := http.PostForm("http://"+faultAddr+"/debug/fault/clock-offset", url.Values{"offset": {d.String()}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("set offset %v: %s", d, resp.Status)
	}
}

// page is what the test reads from the rendered DOM.
type page struct {
	title, state, reason, leadRow string
	refresh                       string
	// charts counts the default generator's inline charts (svg.spark)
	// that draw at least two points.
	charts int
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if strings.EqualFold(a.Key, key) {
			return a.Val
		}
	}
	return ""
}

// parsePage reads the default generator's state, reason and clock-lead row
// and the refresh header from the DOM.
func parsePage(dom string) (page, error) {
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		return page{}, err
	}
	var p page
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "title" && p.title == "": // the page's, not a chart's
				p.title = text(n)
			case n.Data == "meta" && strings.EqualFold(attr(n, "http-equiv"), "refresh"):
				p.refresh = attr(n, "content")
			case attr(n, "id") == "state-default":
				p.state = text(n)
			case attr(n, "id") == "reason-default":
				p.reason = text(n)
			case n.Data == "tr" && strings.HasPrefix(text(n), "clock lead") && p.leadRow == "":
				p.leadRow = text(n)
			case n.Data == "svg" && strings.Contains(attr(n, "class"), "spark") && strings.HasSuffix(attr(n, "id"), "-default"):
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && c.Data == "polyline" && len(strings.Fields(attr(c, "points"))) >= 2 {
						p.charts++
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return p, nil
}

// browser is one headless chromium with one tab.
type browser struct {
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s: %v (test/run.sh installs Debian's chromium)", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first call starts the browser; it must not carry a timeout (that
	// would stop the browser with it). go test's -timeout bounds it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{ctx: ctx}
}

// do runs actions with a time bound.
func (b *browser) do(d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// run runs one action that returns a value, with a time bound.
func run[T any](b *browser, d time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// read returns the tab's current DOM, parsed. A read can fail while the
// page is reloading; callers retry.
func (b *browser) read() (page, error) {
	dom, err := run(b, 3*time.Second, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		return page{}, err
	}
	return parsePage(dom)
}

// waitFor reads the open tab (never navigating: the page's own refresh
// must bring the change) until ok holds or the time is up.
func (b *browser) waitFor(t *testing.T, within time.Duration, what string, ok func(page) bool) page {
	t.Helper()
	deadline := time.Now().Add(within)
	var last page
	var lastErr error
	for time.Now().Before(deadline) {
		p, err := b.read()
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the rendered page did not show %s within %v; last read %+v (error %v)", what, within, last, lastErr)
	return page{}
}

func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := run(b, 10*time.Second, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	if err := os.MkdirAll(artifactDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(artifactDir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(p)
	t.Logf("screenshot: %s", abs)
}

// TestStatusPageShowsFailClosedAndRecovery: an operator has the status page
// open; the node's clock steps back beyond max-lead; within 5 s the page
// shows NOT SERVING with the step and the limit; once the clock is back, it
// shows SERVING again.
func TestStatusPageShowsFailClosedAndRecovery(t *testing.T) {
	httpAddr, faultAddr := startNode(t)
	b := newBrowser(t)
	if err := b.do(15*time.Second, chromedp.Navigate("http://"+httpAddr+"/")); err != nil {
		t.Fatalf("open the status page: %v", err)
	}
	p := b.waitFor(t, 5*time.Second, "SERVING", func(p page) bool { return p.state == "SERVING" })
	if p.refresh != "2" {
		t.Errorf("meta refresh %q, want 2 (seconds)", p.refresh)
	}
	if !strings.Contains(p.leadRow, "limit max-lead "+maxLead.String()) {
		t.Errorf("clock lead row %q does not show the max-lead limit", p.leadRow)
	}
	if p.reason != "" {
		t.Errorf("a serving generator shows a reason: %q", p.reason)
	}
	// The inline charts of rate and lead draw once two seconds are sampled.
	b.waitFor(t, 8*time.Second, "the rate and lead charts", func(p page) bool { return p.charts == 2 })

	// An ID right before the step puts the logical time at the clock, so
	// the step leaves it far ahead.
	if code, body, err := get("http://" + httpAddr + "/v1/ids?count=1"); err != nil || code != 200 {
		t.Fatalf("/v1/ids: %d %s %v", code, body, err)
	}
	setOffset(t, faultAddr, -step)
	p = b.waitFor(t, 5*time.Second, "NOT SERVING with the step and the limit", func(p page) bool {
		return p.state == "NOT SERVING" && showsStep(p.reason, step) && strings.Contains(p.reason, "limit "+maxLead.String())
	})
	if !strings.Contains(p.title, "NOT SERVING") {
		t.Errorf("title %q does not say NOT SERVING", p.title)
	}
	t.Logf("not serving: %s", p.reason)
	b.screenshot(t, "status-not-serving.png")

	setOffset(t, faultAddr, 0)
	p = b.waitFor(t, 10*time.Second, "SERVING after the offset cleared", func(p page) bool { return p.state == "SERVING" })
	if p.reason != "" {
		t.Errorf("serving again but a reason is shown: %q", p.reason)
	}
	b.screenshot(t, "status-serving.png")
}

func TestParsePage(t *testing.T) {
	p, err := parsePage(`<html><head><title>x — NOT SERVING</title><meta http-equiv="refresh" content="2"></head><body>
<h2>Generator default: <span id="state-default">NOT SERVING</span></h2><p id="reason-default">Why: clock rolled back 30s, limit 1s</p>
<table><tr><th>clock lead</th><td>29s (limit max-lead 1s)</td></tr></table></body></html>`)
	if err != nil {
		t.Fatal(err)
	}
	want := page{title: "x — NOT SERVING", state: "NOT SERVING", reason: "Why: clock rolled back 30s, limit 1s", leadRow: "clock lead 29s (limit max-lead 1s)", refresh: "2"}
	if p != want {
		t.Errorf("parsePage = %+v, want %+v", p, want)
	}
}

// showsStep reports whether reason names a rollback of about step: the
// size the node measured, which is the injected step plus whatever the
// machine's own wall clock did in the same interval (a VM its host pauses
// moves it forward a millisecond or so: a fresh-clone run showed
// "clock rolled back 29.999s" for a 30 s step).
func showsStep(reason string, step time.Duration) bool {
	m := regexp.MustCompile(`rolled back (\S+?),`).FindStringSubmatch(reason)
	if m == nil {
		return false
	}
	d, err := time.ParseDuration(m[1])
	return err == nil && d > step-50*time.Millisecond && d < step+50*time.Millisecond
}

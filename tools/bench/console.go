package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/tools/console"
	"github.com/nats-io/nats.go"
)

// The console workload (issue 17): 1,000 pending requests in a person's
// inbox; how long the inbox takes to render, and how soon a new request
// shows on a page that is open.
const (
	consolePending   = 1000
	targetInboxPaint = 300 * time.Millisecond
)

func runConsole(ctx context.Context, env *benchEnv) (*result, error) {
	dir, err := os.MkdirTemp(env.cfg.dir, "heed-bench-console-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	const password = "bench-password-1"
	hash, err := console.HashPassword(password)
	if err != nil {
		return nil, err
	}
	users := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("users:\n  - {identity: \"user:bench\", name: bench, password_bcrypt: %q}\n", hash)), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	web := fmt.Sprintf("127.0.0.1:%d", port)
	upEnv := *env
	upEnv.cfg.upArgs = strings.TrimSpace(env.cfg.upArgs + " --console-listen " + web + " --console-users " + users)
	up, err := startUp(ctx, &upEnv)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	nc, err := nats.Connect(up.url, nats.Name("heed-bench-console"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	base := "http://" + web

	// Sign in (the inbox watch starts then).
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	res, err := hc.Get(base + "/login")
	if err != nil {
		return nil, err
	}
	body := readBody(res)
	tok := cut(body, `name="csrf_token" value="`, `"`)
	if res, err = hc.PostForm(base+"/login", url.Values{"csrf_token": {tok}, "next": {"/inbox"}, "login": {"bench"}, "secret": {password}}); err != nil {
		return nil, err
	}
	if !strings.Contains(readBody(res), "<h1>Inbox</h1>") {
		return nil, fmt.Errorf("console sign-in failed")
	}

	env.logf("console: asking %d questions", consolePending)
	ask := func(i int) error {
		req := command.RequestConfirmation{ID: fmt.Sprintf("bench-console-%d", i), ConfirmRequestedData: events.ConfirmRequestedData{
			Title: fmt.Sprintf("Bench question %d", i), Message: "Approve this bench request?", Requester: "bench", TimeoutS: 3600,
			Options: []events.Option{{Label: "Approve", Value: "proceed"}, {Label: "Reject", Value: "cancel"}}}}
		var rep command.ConfirmationReply
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return command.Call(cctx, nc, command.ConfirmRequest, req, &rep)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 50 {
		wg.Go(func() {
			for i := range next {
				if err := ask(i); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range consolePending {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	// Until the inbox holds them all (each offered after the settle time).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res, err := hc.Get(base + "/inbox")
		if err != nil {
			return nil, err
		}
		if strings.Contains(readBody(res), fmt.Sprintf(`<strong id="total">%d</strong>`, consolePending)) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the inbox did not show %d requests within 2 min", consolePending)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, _, err := settle(ctx, nc, 2*time.Minute); err != nil {
		return nil, err
	}

	// The page, from the console: 20 loads.
	var loads []time.Duration
	size := 0
	for range 20 {
		s := time.Now()
		res, err := hc.Get(base + "/inbox")
		if err != nil {
			return nil, err
		}
		size = len(readBody(res))
		loads = append(loads, time.Since(s))
	}
	slices.Sort(loads)

	// Live: with the inbox's event stream open, a new request shows.
	env.logf("console: 20 new requests while the inbox is open")
	live, err := liveLatency(ctx, hc, base, ask)
	if err != nil {
		return nil, err
	}
	slices.Sort(live)

	rows := [][]string{
		{fmt.Sprintf("GET /inbox with %s pending (the 100 most urgent rendered, %s KB), p50", thousands(consolePending), thousands(int64(size/1000))), millis(percentile(loads, 50)), "", ""},
		{"… p99 (20 loads)", millis(percentile(loads, 99)), "≤ 300 ms", passMiss(percentile(loads, 99) <= targetInboxPaint)},
	}
	missed := percentile(loads, 99) > targetInboxPaint
	paint, perr := browserPaint(ctx, base, password)
	switch {
	case perr != nil:
		rows = append(rows, []string{"in Chromium: navigation → every request shown and the stream live", "not measured: " + perr.Error(), "≤ 300 ms", ""})
	default:
		slices.Sort(paint)
		rows = append(rows, []string{"in Chromium: navigation → the inbox shown and its stream live (5 loads), p50", millis(percentile(paint, 50)), "", ""},
			[]string{"… worst of 5", millis(percentile(paint, 100)), "≤ 300 ms", passMiss(percentile(paint, 100) <= targetInboxPaint)})
		missed = missed || percentile(paint, 100) > targetInboxPaint
	}
	rows = append(rows,
		[]string{"a new request, asked → on the open inbox's stream, p50 (20)", millis(percentile(live, 50)), "", ""},
		[]string{"… p99", millis(percentile(live, 99)), "", ""})
	res2 := &result{tables: []table{{caption: fmt.Sprintf("The console's inbox with %s pending requests (heed up --console-listen, a separate process)", thousands(consolePending)), columns: []string{"measure", "value", "target", "verdict"}, rows: rows}}, missed: missed}
	res2.notes = append(res2.notes,
		"The page is rendered on the server (html/template): the count of what waits and the 100 most urgent requests, \"show more\" for the next 100; its stream (server-sent events, from the change the page was rendered at) then sends each change. Rendering all 1,000 took Chromium 550-900 ms on this machine (845 KB of HTML to parse), so the page shows the top of the inbox, as a person works from the top.",
		"A new request is offered after the bridges' settle time (150 ms, so that --yes, rules and remembered choices answer first): the live figure includes it.",
	)
	return res2, nil
}

func readBody(res *http.Response) string {
	defer res.Body.Close()
	var b strings.Builder
	sc := bufio.NewReader(res.Body)
	buf := make([]byte, 64<<10)
	for {
		n, err := sc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

func cut(s, a, b string) string {
	_, rest, _ := strings.Cut(s, a)
	v, _, _ := strings.Cut(rest, b)
	return v
}

// liveLatency asks 20 questions, one at a time, and times each until the
// inbox's event stream offers it.
func liveLatency(ctx context.Context, hc *http.Client, base string, ask func(int) error) ([]time.Duration, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, base+"/events/inbox", nil)
	sc := &http.Client{Jar: hc.Jar}
	res, err := sc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	seen := make(chan string, 4096)
	go func() {
		r := bufio.NewScanner(res.Body)
		r.Buffer(make([]byte, 1<<20), 1<<20)
		for r.Scan() {
			line := r.Text()
			if id := cut(line, `"id":"`, `"`); strings.HasPrefix(line, "data:") && id != "" {
				seen <- id
			}
		}
		close(seen)
	}()
	var out []time.Duration
	for i := range 20 {
		id := fmt.Sprintf("bench-console-%d", consolePending+i)
		s := time.Now()
		if err := ask(consolePending + i); err != nil {
			return nil, err
		}
		for got := false; !got; {
			select {
			case x, ok := <-seen:
				if !ok {
					return nil, fmt.Errorf("the inbox stream ended")
				}
				got = x == id
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("%s never reached the open inbox", id)
			}
		}
		out = append(out, time.Since(s))
	}
	return out, nil
}

// browserPaint loads the inbox in headless Chromium 5 times and times
// each from navigation until the page has every request and its stream
// has said it is live.
func browserPaint(ctx context.Context, base, password string) ([]time.Duration, error) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		return nil, fmt.Errorf("no chromium")
	}
	dir, err := os.MkdirTemp("", "heed-bench-chromium-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	actx, cancelA := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(dir), chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-dev-shm-usage", true))
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil {
		return nil, err
	}
	step := func(steps ...chromedp.Action[chromedp.Void]) error {
		c, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		return chromedp.Do(c, steps...)
	}
	if err := step(chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS("#login")), chromedp.SendKeys(chromedp.CSS("#login"), "bench"),
		chromedp.SendKeys(chromedp.CSS("#secret"), password), chromedp.Submit(chromedp.CSS("#secret")), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`))); err != nil {
		return nil, err
	}
	var out []time.Duration
	for range 5 {
		s := time.Now()
		if err := step(chromedp.Navigate(base+"/inbox"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`))); err != nil {
			return nil, err
		}
		out = append(out, time.Since(s))
		if os.Getenv("HEED_BENCH_DEBUG") != "" {
			c, cancel := context.WithTimeout(bctx, 10*time.Second)
			v, err := chromedp.Run(c, chromedp.Evaluate[string](`JSON.stringify((({responseStart, responseEnd, domInteractive, domContentLoadedEventEnd, loadEventEnd}) => ({responseStart, responseEnd, domInteractive, domContentLoadedEventEnd, loadEventEnd}))(performance.getEntriesByType('navigation')[0].toJSON())) + " ready " + performance.now()`))
			cancel()
			fmt.Fprintln(os.Stderr, "paint:", time.Since(s), v, err)
		}
		if os.Getenv("HEED_BENCH_DEBUG") != "" {
			c, cancel := context.WithTimeout(bctx, 10*time.Second)
			v, err := chromedp.Run(c, chromedp.Evaluate[string](`JSON.stringify((({responseStart, responseEnd, domInteractive, domContentLoadedEventEnd, loadEventEnd}) => ({responseStart, responseEnd, domInteractive, domContentLoadedEventEnd, loadEventEnd}))(performance.getEntriesByType('navigation')[0].toJSON())) + " ready " + performance.now()`))
			cancel()
			fmt.Fprintln(os.Stderr, "paint:", time.Since(s), v, err)
		}
	}
	return out, nil
}

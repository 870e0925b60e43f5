// Package console is heed's web console: the inbox where people answer
// the confirmations and escalations offered to them, the review of change
// sets, runs watched live with their timelines, learned state and
// statistics (docs/CONSOLE.md). It is a channel like the bridges: it
// speaks only the client package, and every answer or decision it sends
// carries the signed-in person's identity and channel web. Its pages are
// rendered on the server; a small script embedded with them keeps them
// live over server-sent events (no polling) and answers with a click or a
// key.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/tools/bridge"
)

// Channel is what the console's answers and decisions name.
const Channel = "web"

//go:embed web/*.html web/static/*
var webFS embed.FS

// Config configures a console.
type Config struct {
	// Users are who may sign in.
	Users *Users
	// SecureCookies marks cookies Secure even when the console itself
	// serves plain HTTP (behind a proxy that terminates TLS). Over TLS
	// they are always Secure.
	SecureCookies bool
	// SessionTTL is how long a sign-in lasts (default 12 h).
	SessionTTL time.Duration
	// Routing narrows what the inbox offers (the bridges' routing file);
	// the zero value offers everything a person may answer.
	Routing bridge.Routing
	Log     *slog.Logger
}

// Server is a console over one heed.
type Server struct {
	c        *heedclient.Client
	cfg      Config
	log      *slog.Logger
	sessions *sessions
	pages    *template.Template
	static   http.Handler
	mux      *http.ServeMux

	ctx  context.Context
	mu   sync.Mutex
	hubs map[string]*hub // by identity
}

// New builds a console on client c; ctx bounds what it starts (the inbox
// watches).
func New(ctx context.Context, c *heedclient.Client, cfg Config) (*Server, error) {
	if cfg.Users == nil {
		return nil, errors.New("console: no users file")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Routing.Channel = Channel
	pages, err := template.New("").Funcs(funcs).ParseFS(webFS, "web/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	sub, err := fs.Sub(webFS, "web/static")
	if err != nil {
		return nil, err
	}
	s := &Server{c: c, cfg: cfg, log: cfg.Log, sessions: newSessions(cfg.SessionTTL), pages: pages,
		static: http.StripPrefix("/static/", http.FileServer(http.FS(sub))), ctx: ctx, hubs: map[string]*hub{}}
	s.routes()
	return s, nil
}

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.secure(s.mux) }

// Serve serves the console on ln until ctx ends, then shuts down
// (open event streams are closed).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.Handle("GET /static/", s.static)
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	page := func(pattern string, h func(http.ResponseWriter, *http.Request, *session)) {
		m.HandleFunc(pattern, s.signedIn(h))
	}
	action := func(pattern string, h func(http.ResponseWriter, *http.Request, *session)) {
		m.HandleFunc(pattern, s.signedIn(s.csrf(h)))
	}
	page("GET /{$}", func(w http.ResponseWriter, r *http.Request, _ *session) {
		http.Redirect(w, r, "/inbox", http.StatusSeeOther)
	})
	action("POST /logout", s.logout)
	page("GET /inbox", s.inboxPage)
	page("GET /events/inbox", s.inboxEvents)
	page("GET /inbox/more", s.inboxMore)
	action("POST /api/answer", s.answer)
	page("GET /changes", s.changesPage)
	page("GET /changes/{id}", s.changeSetPage)
	page("GET /events/changes/{id}", s.changeSetEvents)
	action("POST /api/changes/{id}/decide", s.decide)
	page("GET /runs", s.runsPage)
	page("GET /events/runs", s.runsEvents)
	page("GET /runs/{id}", s.runPage)
	page("GET /events/runs/{id}", s.runEvents)
	action("POST /api/runs/{id}/{action}", s.runAction)
	page("GET /learned", s.learnedPage)
	action("POST /api/learned/{kind}/{id}/forget", s.forget)
	page("GET /stats", s.statsPage)
	s.mux = m
}

// secure adds the headers every response carries: no framing, no sniffing,
// scripts and styles from the console only.
func (s *Server) secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// signedIn passes the request on with its session, or sends the browser
// to sign in (an API call or an event stream gets 401).
func (s *Server) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var sess *session
		if ck, err := r.Cookie(sessionCookie); err == nil {
			sess = s.sessions.get(ck.Value)
		}
		if sess == nil {
			if r.Method != http.MethodGet || strings.HasPrefix(r.URL.Path, "/events/") || strings.HasPrefix(r.URL.Path, "/api/") {
				jsonError(w, http.StatusUnauthorized, "sign in first")
				return
			}
			http.Redirect(w, r, "/login?next="+template.URLQueryEscaper(r.URL.Path), http.StatusSeeOther)
			return
		}
		h(w, r, sess)
	}
}

// csrf refuses a state-changing request without the session's token.
func (s *Server) csrf(h func(http.ResponseWriter, *http.Request, *session)) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		if err := checkCSRF(r, sess.csrf); err != nil {
			s.log.Warn("console: request refused", "path", r.URL.Path, "identity", sess.user.Identity, "why", err.Error())
			jsonError(w, http.StatusForbidden, err.Error())
			return
		}
		h(w, r, sess)
	}
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	token := randomToken()
	http.SetCookie(w, s.cookie(loginCookie, token, 600, r))
	s.render(w, "login.html", map[string]any{"CSRF": token, "Next": safeNext(r.URL.Query().Get("next")), "Error": r.URL.Query().Get("error")})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(loginCookie)
	if err != nil || checkCSRF(r, ck.Value) != nil {
		http.Error(w, "the sign-in form expired: load it again", http.StatusForbidden)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	u, ok := s.cfg.Users.Check(strings.TrimSpace(r.PostFormValue("login")), r.PostFormValue("secret"))
	if !ok {
		s.log.Info("console: sign-in refused", "login", truncate(r.PostFormValue("login"), 64))
		http.Redirect(w, r, "/login?error=1&next="+template.URLQueryEscaper(next), http.StatusSeeOther)
		return
	}
	id, _ := s.sessions.create(u)
	http.SetCookie(w, s.cookie(sessionCookie, id, int(s.cfg.SessionTTL.Seconds()), r))
	http.SetCookie(w, s.cookie(loginCookie, "", -1, r))
	s.log.Info("console: signed in", "identity", u.Identity)
	s.hub(u.Identity) // start watching what they may answer
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.end(ck.Value)
	}
	http.SetCookie(w, s.cookie(sessionCookie, "", -1, r))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a redirect on the console.
func safeNext(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.Contains(p, "\\") {
		return "/inbox"
	}
	return p
}

// page is what every page's layout needs.
type page struct {
	Title string
	Nav   string
	User  *User
	CSRF  string
	Data  any
}

func (s *Server) renderPage(w http.ResponseWriter, name, title, nav string, sess *session, data any) {
	s.render(w, name, page{Title: title, Nav: nav, User: sess.user, CSRF: sess.csrf, Data: data})
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.pages.ExecuteTemplate(w, name, data); err != nil {
		s.log.Error("console: render", "page", name, "err", err)
	}
}

// fragment renders one template into a string (an item sent live).
func (s *Server) fragment(name string, data any) string {
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("console: render", "fragment", name, "err", err)
	}
	return b.String()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// statusOf is the HTTP status of a heed error.
func statusOf(err error) int {
	switch events.CodeOf(err) {
	case events.CodeInvalidRequest:
		return http.StatusBadRequest
	case events.CodeNotFound:
		return http.StatusNotFound
	case events.CodeConflict:
		return http.StatusConflict
	}
	return http.StatusBadGateway
}

// sse starts a server-sent event stream.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return &sse{w: w, f: f}, true
}

// send writes one event; data is JSON.
func (e *sse) send(event string, data any) error { return e.sendID(event, "", data) }

// sendID sends an event with an id: the browser's reconnect sends the
// last one back (Last-Event-ID), to go on from there.
func (e *sse) sendID(event, id string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id != "" {
		_, err = fmt.Fprintf(e.w, "id: %s\nevent: %s\ndata: %s\n\n", id, event, b)
	} else {
		_, err = fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, b)
	}
	if err != nil {
		return err
	}
	e.f.Flush()
	return nil
}

// pump hands what arrives on ch to fn until the request ends, ch closes
// (fn sees ok false once) or fn fails, pinging the stream every 20 s
// meanwhile.
func pump[T any](ctx context.Context, out *sse, ch <-chan T, fn func(v T, ok bool) error) {
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if out.ping() != nil {
				return
			}
		case v, ok := <-ch:
			if fn(v, ok) != nil || !ok {
				return
			}
		}
	}
}

// ping keeps proxies from closing an idle stream.
func (e *sse) ping() error {
	if _, err := fmt.Fprint(e.w, ": ping\n\n"); err != nil {
		return err
	}
	e.f.Flush()
	return nil
}

func truncate(s string, n int) string { return textutil.Cut(s, n) }

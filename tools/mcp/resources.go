package heedmcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	confirmationsURI = "heed://confirmations"
	runURIPrefix     = "heed://run/"
)

func (s *Server) addResources() {
	s.srv.AddResource(&mcp.Resource{URI: confirmationsURI, Name: "confirmations", Title: "Pending confirmations",
		Description: "Every confirmation waiting for an answer: id, question, options, default, deadline, run. Subscribe to be told when it changes.", MIMEType: "application/json"}, s.readConfirmations)
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: runURIPrefix + "{id}", Name: "run", Title: "A run's timeline",
		Description: "A run's status and every event in order. Subscribe to be told when it changes.", MIMEType: "application/json"}, s.readRun)
}

type pendingConfirmation struct {
	ID        string          `json:"id"`
	Title     string          `json:"title,omitempty"`
	Message   string          `json:"message"`
	Options   []events.Option `json:"options"`
	Default   string          `json:"default,omitempty"`
	Deadline  time.Time       `json:"deadline,omitzero"`
	RunID     string          `json:"run_id,omitempty"`
	Approvers []string        `json:"approvers,omitempty"`
}

func (s *Server) readConfirmations(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	entries, err := s.c.Index(ctx, "confirm")
	if err != nil {
		return nil, toolError(err)
	}
	out := []pendingConfirmation{}
	for _, e := range entries {
		if e.Status != readmodel.StatusPending && e.Status != readmodel.StatusDelegated {
			continue
		}
		st, err := s.c.Confirmation(ctx, e.ID)
		if err != nil || st.Request == nil || !st.Open() {
			continue
		}
		p := pendingConfirmation{ID: e.ID, Title: st.Request.Title, Message: st.Request.Message, Options: st.Request.Options, Default: st.Gate.Default,
			RunID: st.Request.RunID, Approvers: st.Request.Approvers}
		p.Deadline = st.Deadline()
		out = append(out, p)
	}
	return jsonResource(req.Params.URI, out)
}

type runTimeline struct {
	RunResult
	Events []timelineEvent `json:"events"`
}

type timelineEvent struct {
	Seq  uint64          `json:"seq"`
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

func (s *Server) readRun(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	id := strings.TrimPrefix(req.Params.URI, runURIPrefix)
	if !events.ValidID(id) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	r, err := s.c.Run(ctx, id)
	if err != nil || r.LastSeq == 0 {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	msgs, err := s.c.History(ctx, events.SubjectFilter("run", id))
	if err != nil {
		return nil, toolError(err)
	}
	out := runTimeline{RunResult: s.result(ctx, r), Events: []timelineEvent{}}
	for _, m := range msgs {
		if m.Event == nil {
			continue
		}
		out.Events = append(out.Events, timelineEvent{Seq: m.Seq, Type: m.Event.Type(), ID: m.Event.ID(), Time: m.Event.Time(), Data: m.Event.Data()})
	}
	return jsonResource(req.Params.URI, out)
}

func jsonResource(uri string, v any) (*mcp.ReadResourceResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

// subscribe tells subscribers when a resource changes, once a read of it
// shows the change: the pending confirmations when the index they are
// listed from has it, a run when the log has stored its event. (Told on
// the publish alone, a reader could read before the change is visible and
// hear nothing after it.) The watch is in place when subscribe returns; a
// watch lost is taken up again, and the subscriber told once it is back
// (what changed meanwhile).
func (s *Server) subscribe(uri string) error {
	// start puts the watch in place; run follows it until it ends.
	var start func(ctx context.Context) (run func(changed func()) error, err error)
	switch {
	case uri == confirmationsURI:
		start = func(ctx context.Context) (func(func()) error, error) {
			ch, err := s.c.WatchIndex(ctx, "confirm")
			if err != nil {
				return nil, err
			}
			return func(changed func()) error {
				for range ch {
					changed()
				}
				return errors.New("the index watch ended")
			}, nil
		}
	case strings.HasPrefix(uri, runURIPrefix) && events.ValidID(strings.TrimPrefix(uri, runURIPrefix)):
		id := strings.TrimPrefix(uri, runURIPrefix)
		var after uint64 // the run's last event seen: what came before is no change
		start = func(ctx context.Context) (func(func()) error, error) {
			if after == 0 {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				r, err := s.c.Run(rctx, id)
				cancel()
				if err == nil {
					after = r.LastSeq
				} else if events.CodeOf(err) != events.CodeNotFound {
					return nil, err
				}
			}
			return func(changed func()) error {
				return s.c.FollowStored(ctx, events.SubjectFilter("run", id), after, func(seq uint64, _ *events.Event) error {
					after = seq
					changed()
					return nil
				})
			}, nil
		}
	default:
		return mcp.ResourceNotFoundError(uri)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[uri] != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	run, err := start(ctx)
	if err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	s.subs[uri] = func() { cancel(); <-done }
	go func() {
		defer close(done)
		changed := func() {
			_ = s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
		wait := time.Second
		for {
			err := run(changed)
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("resource watch lost; taking it up again", "uri", uri, "err", err, "in", wait)
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				wait = min(2*wait, 30*time.Second)
				if run, err = start(ctx); err == nil {
					break
				}
			}
			wait = time.Second
			changed() // what changed while it was lost
		}
	}()
	return nil
}

func (s *Server) unsubscribe(uri string) {
	s.mu.Lock()
	stop := s.subs[uri]
	delete(s.subs, uri)
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

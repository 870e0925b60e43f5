package healer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go/micro"
)

// commandTimeout bounds one fix command.
const commandTimeout = 10 * time.Second

// fixCommands serves heed.cmd.fix.{learn,forget}. The healer is the one to
// refuse a fix: it is the one that would apply it, with its tools.
type fixCommands struct {
	bus   *events.Bus
	tools *tool.Registry
	now   func() time.Time
}

func (c *fixCommands) serve(ctx context.Context, rt *service.Runtime) (micro.Service, error) {
	svc, err := micro.AddService(rt.Conn, micro.Config{Name: "heed-healer-commands", Version: service.Version, Description: "heed healer commands: teach and revoke fixes"})
	if err != nil {
		return nil, fmt.Errorf("register commands: %w", err)
	}
	v := c.bus.Codec().Validator()
	dl := command.All{command.DeadLetters{Bus: c.bus, Service: "heed-healer-commands", Log: rt.Log}, command.Gate(rt.Current)}
	g := svc.AddGroup(events.CommandPrefix + ".fix")
	if err := g.AddEndpoint("learn", command.Handler(ctx, v, command.FixLearn, commandTimeout, c.learn, dl)); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("register commands: %w", err)
	}
	if err := g.AddEndpoint("forget", command.Handler(ctx, v, command.FixForget, commandTimeout, c.forget, dl)); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("register commands: %w", err)
	}
	return svc, nil
}

func (c *fixCommands) learn(ctx context.Context, req *command.LearnFix) (any, error) {
	id, data, err := TaughtFix(req, c.tools)
	if err != nil {
		return nil, err
	}
	ev, err := events.NewEvent(events.FixLearned, id, fmt.Sprintf("%s/taught/%d", id, c.now().UnixNano()), Source, data)
	if err != nil {
		return nil, err
	}
	if _, err := c.bus.Publish(ctx, &ev); err != nil {
		return nil, err
	}
	return command.FixReply{ID: id, EventID: ev.ID()}, nil
}

func (c *fixCommands) forget(ctx context.Context, req *command.ForgetFix) (any, error) {
	// The fix's own log, not the fixes projection: a fix taught a moment
	// ago may not be projected yet (forget answered not_found), and two
	// forgets at once both wrote one.
	if !events.ValidID(req.ID) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a fix id", req.ID)
	}
	filter := events.SubjectFilter("fix", req.ID)
	last, err := events.LastOf(ctx, c.bus.JetStream(), events.EventStream, filter)
	if err != nil {
		return nil, err
	}
	if last == nil || last.Subject != events.FixLearned.Subject(req.ID) {
		return nil, events.Errorf(events.CodeNotFound, "no learned fix %q (heed fixes list shows them)", req.ID)
	}
	by := req.By
	if by == "" {
		by = "unknown"
	}
	ev, err := events.NewEvent(events.FixForgotten, req.ID, fmt.Sprintf("%s/forget/%d", req.ID, c.now().UnixNano()), Source, events.FixForgottenData{By: by, Reason: req.Reason})
	if err != nil {
		return nil, err
	}
	if _, err := c.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: filter, Seq: last.Seq}); err != nil {
		if errors.Is(err, events.ErrStaleRead) {
			return nil, events.Errorf(events.CodeConflict, "fix %s changed meanwhile (forgotten, or learned again): heed fixes list shows it as it is", req.ID)
		}
		return nil, err
	}
	return command.FixReply{ID: req.ID, EventID: ev.ID()}, nil
}

// TaughtFix checks a fix taught by hand against the healer's tools and
// returns its id and its heed.fix.learned data. It refuses, with code
// invalid_request, what the healer could never apply: a tool or action
// tool it does not have, a patch template that does not compile, a fix
// that changes nothing.
func TaughtFix(req *command.LearnFix, tools *tool.Registry) (string, events.FixLearnedData, error) {
	var problems []string
	if _, ok := tools.Get(req.Tool); !ok {
		problems = append(problems, "tool "+unknownTool(req.Tool, tools))
	}
	if req.Action != nil {
		if _, ok := tools.Get(req.Action.Tool); !ok {
			problems = append(problems, "action tool "+unknownTool(req.Action.Tool, tools))
		}
	}
	if strings.TrimSpace(req.Match) == "" {
		problems = append(problems, "match is blank: give the text of the error this fixes")
	}
	if len(req.ArgsPatch) == 0 && req.Action == nil {
		problems = append(problems, "a fix needs args to change (args_patch) and/or an action")
	}
	if err := skill.CheckArgsPatch(req.ArgsPatch); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return "", events.FixLearnedData{}, events.Errorf(events.CodeInvalidRequest, "the healer cannot apply this fix: %s", strings.Join(problems, "; "))
	}
	by := req.By
	if by == "" {
		by = "unknown"
	}
	data := events.FixLearnedData{Tool: req.Tool, ErrorPattern: events.ErrorSignature(req.Match), Match: req.Match,
		RootCause: req.RootCause, Description: req.Description, Source: events.FixFromPerson, By: by, Action: req.Action}
	if len(req.ArgsPatch) > 0 {
		data.ArgsPatch = req.ArgsPatch
	}
	return events.FixID(req.Tool, "match:"+strings.ToLower(req.Match)), data, nil
}

func unknownTool(name string, tools *tool.Registry) string {
	if tools == nil || tools.File == "" {
		return fmt.Sprintf("%q: the healer has no tools file (start heed with --tools FILE)", name)
	}
	return fmt.Sprintf("%q is not in the tools file %s%s", name, tools.File, textutil.Hint(name, tools.Names()))
}

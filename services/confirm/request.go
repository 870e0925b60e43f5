package confirm

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// SubjectRequest is the router's command for a validated confirmation
// request from any agent: nothing is written unless the request is valid.
const SubjectRequest = events.CommandPrefix + ".confirm.request"

// Request is a direct confirmation request. ID is optional: an agent that
// chooses its own id can subscribe to heed.confirm.<id>.answered first and
// never miss the answer.
type Request struct {
	ID string `json:"id,omitempty"`
	events.ConfirmRequestedData
}

// RequestReply says where the answer will appear.
type RequestReply struct {
	ID            string    `json:"id"`
	Deadline      time.Time `json:"deadline"`
	AnswerSubject string    `json:"answer_subject"`
}

func (r *router) requestCommand(req micro.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := r.request(ctx, req.Data())
	if err != nil {
		_ = req.Error(string(events.CodeOf(err)), err.Error(), []byte(err.Error()))
		return
	}
	_ = req.RespondJSON(out)
}

func (r *router) request(ctx context.Context, body []byte) (*RequestReply, error) {
	var in Request
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "request is not valid JSON for a confirmation: %v", err)
	}
	if in.ID == "" {
		in.ID = "c" + strings.ToLower(ulid.Make().String())
	}
	if !events.ValidID(in.ID) {
		return nil, events.Errorf(events.CodeInvalidRequest, "id %q: use letters, digits, '-' and '_' (at most %d)", in.ID, events.MaxIDLength)
	}
	if in.Requester == "" {
		in.Requester = "agent"
	}
	if problem := Validate(&in.ConfirmRequestedData, MaxMessageBytes); problem != "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s", problem)
	}
	ev, err := events.NewEvent(events.ConfirmRequested, in.ID, in.ID+"/requested", in.Requester, in.ConfirmRequestedData)
	if err != nil {
		return nil, err
	}
	// What the event contract refuses (a negative timeout, a bad skill
	// name, too many options) is the requester's mistake too.
	if err := r.bus.Codec().Check(&ev); err != nil {
		msg := err.Error()
		var e *events.Error
		if errors.As(err, &e) {
			msg = e.Message
		}
		return nil, events.Errorf(events.CodeInvalidRequest, "%s", msg)
	}
	// Expect no earlier event: an id is used once.
	if _, err := r.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", in.ID), Seq: 0}); err != nil {
		if events.CodeOf(err) == events.CodeConflict {
			return nil, events.Errorf(events.CodeConflict, "confirmation %s already exists", in.ID)
		}
		return nil, err
	}
	return &RequestReply{ID: in.ID, Deadline: r.cfg.Deadline(ev.Time(), in.TimeoutS), AnswerSubject: events.ConfirmAnswered.Subject(in.ID)}, nil
}

package confirm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// commandTimeout bounds one command's work.
const commandTimeout = 10 * time.Second

func (r *router) registerCommands(ctx context.Context, svc micro.Service) error {
	v := r.bus.Codec().Validator()
	dl := command.All{command.DeadLetters{Bus: r.bus, Service: "heed-confirm-commands", Log: r.log}, command.Gate(r.current)}
	if err := svc.AddEndpoint("request", command.Handler(ctx, v, command.ConfirmRequest, commandTimeout, r.request, dl), micro.WithEndpointSubject(command.ConfirmRequest)); err != nil {
		return err
	}
	return svc.AddEndpoint("answer", command.Handler(ctx, v, command.ConfirmAnswer, commandTimeout, r.answerCommand, dl), micro.WithEndpointSubject(command.ConfirmAnswer))
}

// request writes a validated confirmation request from any agent: nothing
// is written unless the request can be offered.
func (r *router) request(ctx context.Context, in *command.RequestConfirmation) (any, error) {
	if in.ID == "" {
		in.ID = "c" + strings.ToLower(ulid.Make().String())
	}
	if !events.ValidID(in.ID) {
		return nil, events.Errorf(events.CodeInvalidRequest, "id %q: use letters, digits, '-' and '_' (at most %d)", in.ID, events.MaxIDLength)
	}
	if in.Requester == "" {
		in.Requester = "agent"
	}
	if strings.HasPrefix(in.Requester, events.ServiceSourcePrefix) {
		// The requester is the event's source, and what a source under
		// heed/ says is taken as a service's word (the learner takes the
		// skill and step of the runner's own confirmations).
		return nil, events.Errorf(events.CodeInvalidRequest, "requester %q: names beginning %q are heed's services'", in.Requester, events.ServiceSourcePrefix)
	}
	if problem := confirmation.Validate(&in.ConfirmRequestedData); problem != "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s", problem)
	}
	ev, err := events.NewEvent(events.ConfirmRequested, in.ID, in.ID+"/requested", in.Requester, in.ConfirmRequestedData)
	if err != nil {
		return nil, err
	}
	// What the event contract refuses (a bad source, a bad skill name) is
	// the requester's mistake too.
	if err := r.bus.Codec().Check(&ev); err != nil {
		msg := err.Error()
		var e *events.Error
		if errors.As(err, &e) {
			msg = e.Message
		}
		return nil, events.Errorf(events.CodeInvalidRequest, "%s", msg)
	}
	// Expect no earlier message: an id is used once.
	if _, err := r.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", in.ID), Seq: 0}); err != nil {
		if events.CodeOf(err) == events.CodeConflict {
			return nil, events.Errorf(events.CodeConflict, "confirmation %s already exists", in.ID)
		}
		return nil, err
	}
	return command.ConfirmationReply{ID: in.ID, Deadline: r.cfg.Deadline(ev.Time(), in.TimeoutS), AnswerSubject: events.ConfirmAnswered.Subject(in.ID)}, nil
}

// answerCommand records a person's answer: method user, with who answered
// and where. It is written only if it is the first valid answer; a late
// one gets conflict naming the answer that took effect.
func (r *router) answerCommand(ctx context.Context, in *command.AnswerConfirmation) (any, error) {
	channel := in.Channel
	if channel == "" {
		channel = "api"
	}
	// The answers consumer holds the open confirmations: judging from its
	// copy costs no read of the log, and the write's expected-sequence
	// guard catches a copy that is behind (then the log is read).
	var opts []confirmation.AnswerOption
	if known := r.gates.state(in.ID); known != nil {
		opts = append(opts, confirmation.FromState{State: known})
	}
	eventID := ""
	if in.RequestID != "" {
		eventID = answerEventID(in.ID, in.By, in.RequestID)
		opts = append(opts, confirmation.WithEventID(eventID))
	}
	st, err := confirmation.Answer(ctx, r.bus, Source, in.ID, events.ConfirmAnsweredData{
		Choice: in.Choice, Method: events.MethodUser, By: in.By, Channel: channel, Reason: in.Reason, Remember: in.Remember,
	}, opts...)
	if err != nil {
		if events.CodeOf(err) == events.CodeNotFound {
			return nil, events.Errorf(events.CodeNotFound, "no confirmation %q (heed confirm list shows the open ones)", in.ID)
		}
		return nil, err
	}
	if eventID != "" {
		return requestReply(in, st, eventID)
	}
	return answerReply(in.ID, st), nil
}

// answerEventID is the id of the answer written for a request id: the
// same request from the same person is the same event (a retry is
// stored once, and finds the first), another person's is another.
func answerEventID(id, by, requestID string) string {
	// The length of by first: ("user:alice", "x") and ("user", "alice:x")
	// are two people's requests.
	sum := sha256.Sum256([]byte("heed-answer:" + strconv.Itoa(len(by)) + ":" + by + ":" + requestID))
	return id + "/answer/rq-" + hex.EncodeToString(sum[:12])
}

// requestReply is the reply to an answer with a request id: the answer
// stored under it, the first time or again (a retry). The same request id
// with another choice is a conflict: a new answer needs a new request id.
func requestReply(in *command.AnswerConfirmation, st *confirmation.State, eventID string) (any, error) {
	for _, a := range st.Answers {
		if a.EventID != eventID {
			continue
		}
		if a.Data.Choice != in.Choice {
			return nil, events.Errorf(events.CodeConflict, "request id %q answered confirmation %s with %q at %s; a new answer needs a new request id", in.RequestID, in.ID, a.Data.Choice, a.At.UTC().Format(time.RFC3339))
		}
		if st.AnswerID == eventID {
			return answerReply(in.ID, st), nil
		}
		return voteReply(in.ID, st, a), nil
	}
	return answerReply(in.ID, st), nil
}

// answerReply is what Answer wrote: the answer that took effect or, with
// a quorum, the vote counted (then the last of the state's answers), with
// the votes so far and how many more its choice needs.
func answerReply(id string, st *confirmation.State) command.AnswerReply {
	if st.Answer == nil && len(st.Answers) > 0 {
		return voteReply(id, st, st.Answers[len(st.Answers)-1])
	}
	var seq uint64
	for _, a := range st.Answers {
		if a.EventID == st.AnswerID {
			seq = a.Seq
		}
	}
	a := st.Answer
	return command.AnswerReply{ID: id, EventID: st.AnswerID, Seq: seq, Choice: a.Choice, Method: a.Method, By: a.By, Channel: a.Channel, RunID: a.RunID, At: st.AnsweredAt.UTC(), Votes: votesOf(st)}
}

// voteReply is the reply for the counted vote a: the votes so far and how
// many more its choice needs.
func voteReply(id string, st *confirmation.State, a confirmation.AnswerRecord) command.AnswerReply {
	return command.AnswerReply{ID: id, EventID: a.EventID, Seq: a.Seq, Choice: a.Data.Choice, Method: a.Data.Method, By: a.Data.By, Channel: a.Data.Channel, RunID: a.Data.RunID, At: a.At.UTC(),
		Counted: true, Votes: votesOf(st), Needed: st.Gate.Needed(a.Data.Choice)}
}

func votesOf(st *confirmation.State) []command.Vote {
	var votes []command.Vote
	for _, v := range st.Gate.Votes {
		votes = append(votes, command.Vote{Choice: v.Choice, By: v.By, Channel: v.Channel, At: v.At})
	}
	return votes
}

// deadlineBody is the plain JSON a deadline's schedule carries (and its
// fired copy): it is not an event, and says so in its header.
type deadlineBody struct {
	ConfirmID string    `json:"confirm_id"`
	Deadline  time.Time `json:"deadline"`
	Default   string    `json:"default"`
	RunID     string    `json:"run_id,omitempty"`
}

// Headers of a deadline's schedule message.
const (
	HeaderSchedule = "Heed-Schedule" // what the schedule is: confirm-deadline
	scheduleKind   = "confirm-deadline"
)

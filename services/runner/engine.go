package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go/jetstream"
)

// Source is the CloudEvents source of everything the runner publishes.
const Source = events.RunnerSource

// engine drives runs. Its consumer hands each run's events to one worker
// (partitioned by run id), so a Run is only ever touched by one goroutine
// at a time; tool calls run in their own goroutines and report back by
// publishing events.
type engine struct {
	bus     *events.Bus
	invoker *tool.Invoker
	skills  *skill.Cache
	log     *slog.Logger
	ackWait time.Duration

	decider *decider
	timers  map[string]*timer
	// callCtx is the context of the calls the sweep makes (no delivery
	// holds them): it outlives SIGTERM until the drain has let them
	// finish (detached counts them).
	callCtx  context.Context
	detached sync.WaitGroup
	metrics  *service.Metrics // nil in tests without a runtime
	// current is nil while this instance may act (Runtime.Current): the
	// sweep and the abandon loop of a paused instance whose stand-by took
	// over do not run when it resumes. nil: always.
	current func() error

	mu       sync.Mutex
	runs     map[string]*runstate.Run
	inflight map[string]*flight // key: run/index/attempt
	// finished keeps the runs that ended last (ids oldest first in
	// finishedIDs): the events published with the end are still to be
	// delivered, and each would otherwise rebuild the run from the log
	// only to find it over.
	finished    map[string]*runstate.Run
	finishedIDs []string
	finishedAt  []time.Time // when each of finishedIDs ended here
	// Runs waiting for an answer: a paused run's state is kilobytes and
	// may wait for hours. The maxWaiting that paused last stay cached
	// (an answer to one of them needs no read); older ones are parked:
	// out of runs, read from the log again when their answer (or anything
	// else) comes. The sweep visits parked runs too. waitingIDs is in
	// pause order and may hold ids that have moved on since (waiting says
	// which still wait). waiting and parked map a run to the confirmation
	// it waits for.
	waiting    map[string]waitingRun
	waitingIDs []string
	parked     map[string]waitingRun
	maxWaiting int
	// tally is what the index says of a run's whole history: a parked
	// run read back by position must match it (runstate.Run.Replay).
	tally func(ctx context.Context, id string) (runstate.Tally, error)
	// handled is when this process last handled an event of each driven
	// run (its wall clock): a run handled within SweepQuiet is not quiet,
	// so the sweep passes it by without reading its log. Every event the
	// runner writes for a run is written after it handled the run's
	// previous one, so a run whose next delivery was lost has been quiet,
	// by the log's times, for no longer than since it was handled.
	handled map[string]time.Time
}

// defaultMaxWaiting bounds the paused runs kept in memory: 10,000 runs
// waiting for people held about 45 MB of heap when all were kept.
const defaultMaxWaiting = 1000

// finishedKeep is how long a finished run is kept: its end's deliveries
// come within moments, and kept longer its state is only memory at rest
// (up to maxFinished states of kilobytes each). Trimmed as runs end and by
// the sweep's loop.
const finishedKeep = 30 * time.Second

// maxFinished bounds the finished runs kept.
const maxFinished = 1024

// waitingRun is what the runner keeps of a run waiting for an answer
// besides its state: the confirmation it waits for, and where its messages
// were when it paused (runstate.Run.Seqs, taken by the run's own worker),
// so that once parked the answer's load reads them by sequence
// (runstate.Run.Replay) instead of by subject from the middle of the log,
// which makes the server walk every message of every other run stored in
// between.
type waitingRun struct {
	confirmID string
	seqs      []uint64
}

// indexTally is the index's count of a run's events and its last event's
// id.
func indexTally(js jetstream.JetStream) func(ctx context.Context, id string) (runstate.Tally, error) {
	return func(ctx context.Context, id string) (runstate.Tally, error) {
		n, last, err := readmodel.IndexTally(ctx, js, "run", id)
		return runstate.Tally{Count: n, LastID: last}, err
	}
}

type flight struct {
	cancel context.CancelFunc
	state  CallState
}

func newEngine(bus *events.Bus, inv *tool.Invoker, log *slog.Logger, ackWait time.Duration) *engine {
	return &engine{bus: bus, invoker: inv, skills: skill.NewCache(), log: log, ackWait: ackWait, callCtx: context.Background(),
		runs: map[string]*runstate.Run{}, inflight: map[string]*flight{}, timers: map[string]*timer{}, finished: map[string]*runstate.Run{},
		waiting: map[string]waitingRun{}, parked: map[string]waitingRun{}, maxWaiting: defaultMaxWaiting, handled: map[string]time.Time{},
		tally:   indexTally(bus.JetStream()),
		decider: &decider{healWait: 3 * time.Second, healTimeout: 2 * time.Minute, tools: inv.Registry, log: log}}
}

// runIDOf is the partition key: the run an event belongs to. An answer
// that does not name its run (run_id is optional for outside writers) is
// mapped by its confirmation id when the runner made it (ConfirmID).
func runIDOf(ev *events.Event) string {
	if events.Type(ev.Type()).Kind() == "run" {
		return ev.Subject()
	}
	var d struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(ev.Data(), &d)
	if d.RunID != "" {
		return d.RunID
	}
	if run, _, _, ok := ParseConfirmID(ev.Subject()); ok {
		return run
	}
	return ev.Subject()
}

// load returns the cached run, or rebuilds it from the log. A brand-new
// run's first event needs no read: there is nothing before it.
func (e *engine) load(ctx context.Context, id string, d *events.Delivery) (*runstate.Run, error) {
	e.mu.Lock()
	r, ok := e.runs[id]
	if !ok {
		r, ok = e.finished[id]
	}
	e.mu.Unlock()
	if ok {
		return r, nil
	}
	r = runstate.New(id)
	fresh := events.Type(d.Event.Type()) == events.RunRequested && d.Delivered == 1
	own := events.Type(d.Event.Type()).Kind() == "run"
	read := fresh
	e.mu.Lock()
	p, parked := e.parked[id]
	e.mu.Unlock()
	if !fresh && parked {
		pr, err := e.byPositions(ctx, id, p.seqs)
		if err != nil {
			return nil, err
		}
		if pr != nil {
			r, read = pr, !own || pr.LastSeq >= d.Seq
		}
	}
	if !read {
		// The delivered event of a run is in its history: a read that ends
		// before it came from a replica behind the log (any replica of an
		// R3 stream may answer a direct get) and goes on from where it
		// stopped, for up to a second.
		deadline := time.Now().Add(time.Second)
		for {
			if err := r.CatchUp(ctx, e.bus, e.skills); err != nil {
				return nil, err
			}
			if !own || r.LastSeq >= d.Seq || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(25 * time.Millisecond):
			}
		}
	}
	e.mu.Lock()
	e.runs[id] = r
	delete(e.parked, id)
	e.mu.Unlock()
	return r, nil
}

// byPositions reads run id from the positions of its messages (what its
// worker handed over when it paused) and whatever it stored after them,
// kept only if they make the index's tally (runstate.Run.Replay); nil when
// there are none or they do not hold: the caller reads the run by
// subject.
func (e *engine) byPositions(ctx context.Context, id string, seqs []uint64) (*runstate.Run, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	r := runstate.New(id)
	ok, err := r.Replay(ctx, e.bus, e.skills, seqs, e.tallyOf(ctx, id))
	if err != nil || !ok {
		return nil, err
	}
	return r, nil
}

// tallyOf is the index's tally of run id, or none (Replay then refuses,
// and the run is read by subject) when the index cannot be read.
func (e *engine) tallyOf(ctx context.Context, id string) runstate.Tally {
	want, err := e.tally(ctx, id)
	if err != nil {
		e.log.Debug("the index's tally of a run", "run", id, "err", err)
		return runstate.Tally{}
	}
	return want
}

// positions are where run id's messages were when it paused, if it
// waits for an answer (cached or parked): what its worker handed over.
func (e *engine) positions(id string) []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w, ok := e.waiting[id]; ok {
		return w.seqs
	}
	return e.parked[id].seqs
}

func (e *engine) forget(id string) {
	e.mu.Lock()
	delete(e.runs, id)
	if _, ok := e.finished[id]; ok {
		// Its entry goes too: were it to end again, an old entry would
		// trim the new state.
		delete(e.finished, id)
		if i := slices.Index(e.finishedIDs, id); i >= 0 {
			e.finishedIDs = slices.Delete(e.finishedIDs, i, i+1)
			e.finishedAt = slices.Delete(e.finishedAt, i, i+1)
		}
	}
	delete(e.parked, id)
	delete(e.waiting, id)
	delete(e.handled, id)
	e.mu.Unlock()
}

// knows reports whether this process has handled an event of run id and
// still keeps it: cached, parked, finished or handled lately.
func (e *engine) knows(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, running := e.runs[id]
	_, parked := e.parked[id]
	_, finished := e.finished[id]
	_, handled := e.handled[id]
	return running || parked || finished || handled
}

// touch notes that an event of run id was handled now.
func (e *engine) touch(id string, now time.Time) {
	e.mu.Lock()
	e.handled[id] = now
	e.mu.Unlock()
}

// wait notes that run id now waits for an answer to confirmation cid, its
// messages at seqs (taken by its own worker: parking never reads another
// worker's state), and parks the runs that have waited longest beyond
// maxWaiting: their states leave the cache (a worker handling one
// meanwhile keeps its pointer; its next event reads the log), their ids
// and positions stay.
func (e *engine) wait(id, cid string, seqs []uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.waiting[id]; !ok {
		e.waitingIDs = append(e.waitingIDs, id)
	}
	e.waiting[id] = waitingRun{confirmID: cid, seqs: seqs}
	for len(e.waiting) > e.maxWaiting && len(e.waitingIDs) > 0 {
		old := e.waitingIDs[0]
		e.waitingIDs = e.waitingIDs[1:]
		w, ok := e.waiting[old]
		if !ok {
			continue // moved on since it paused
		}
		delete(e.waiting, old)
		if _, ok := e.runs[old]; ok {
			delete(e.runs, old)
			e.parked[old] = w
		}
	}
	if len(e.waitingIDs) > 4*e.maxWaiting+64 {
		// Compact the ids of runs that moved on.
		kept := e.waitingIDs[:0]
		for _, w := range e.waitingIDs {
			if _, ok := e.waiting[w]; ok {
				kept = append(kept, w)
			}
		}
		e.waitingIDs = slices.Clip(kept)
	}
}

// moved notes that run id no longer waits for an answer.
func (e *engine) moved(id string) {
	e.mu.Lock()
	delete(e.waiting, id)
	e.mu.Unlock()
}

// drivenIDs are the runs this runner drives and has not seen end (the
// cached ones and the parked ones), less those it handled an event of
// after quietSince: they are not quiet, and reading them is wasted. Each
// maps to the confirmation it waits for, "" if it waits for none.
func (e *engine) drivenIDs(quietSince time.Time) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make(map[string]string, len(e.runs)+len(e.parked))
	for id := range e.runs {
		if e.handled[id].Before(quietSince) {
			ids[id] = e.waiting[id].confirmID
		}
	}
	for id, p := range e.parked {
		if e.handled[id].Before(quietSince) {
			ids[id] = p.confirmID
		}
	}
	return ids
}

// done moves an ended run to the finished runs.
func (e *engine) done(r *runstate.Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.runs, r.ID)
	delete(e.parked, r.ID)
	delete(e.waiting, r.ID)
	delete(e.handled, r.ID)
	if _, ok := e.finished[r.ID]; !ok {
		e.finishedIDs = append(e.finishedIDs, r.ID)
		e.finishedAt = append(e.finishedAt, time.Now())
	}
	e.finished[r.ID] = r
	if len(e.finishedIDs) > maxFinished {
		delete(e.finished, e.finishedIDs[0])
		e.finishedIDs, e.finishedAt = e.finishedIDs[1:], e.finishedAt[1:]
	}
	e.trimFinishedLocked(time.Now())
}

// trimFinished forgets the finished runs that ended more than
// finishedKeep before now (as each end does, and the sweep's loop, for a
// runner at rest).
func (e *engine) trimFinished(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.trimFinishedLocked(now)
}

func (e *engine) trimFinishedLocked(now time.Time) {
	n := 0
	for n < len(e.finishedAt) && now.Sub(e.finishedAt[n]) > finishedKeep {
		delete(e.finished, e.finishedIDs[n])
		n++
	}
	if n == 0 {
		return
	}
	// Copied, so the arrays of what was forgotten go too.
	e.finishedIDs, e.finishedAt = slices.Clone(e.finishedIDs[n:]), slices.Clone(e.finishedAt[n:])
}

// handle is the consumer's handler.
func (e *engine) handle(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
	id := runIDOf(d.Event)
	if !events.ValidID(id) {
		return nil, nil
	}
	var answered *confirmation.State
	if events.Type(d.Event.Type()).Kind() == "confirm" {
		st, err := e.takesEffect(ctx, id, d)
		if err != nil || st == nil {
			return nil, err
		}
		answered = st
	}
	r, err := e.load(ctx, id, d)
	if err != nil {
		return nil, err
	}
	if answered != nil && r.Requested && !r.Terminal() {
		for i := range r.Steps {
			if r.Steps[i].ConfirmID == answered.ID {
				if why := foreignRequest(r, i, answered); why != "" {
					return nil, e.failTaken(ctx, r, i, answered.ID, why)
				}
			}
		}
	}
	e.touch(id, time.Now())
	if err := r.Apply(d.Event, d.Seq, e.skills); err != nil {
		return nil, events.Poison(err)
	}
	if !r.Requested {
		// Driven by an outside agent, or not ours: nothing to do.
		if r.Terminal() {
			e.done(r)
		}
		return nil, nil
	}
	switch events.Type(d.Event.Type()) {
	case events.HealTriggered, events.HealRetried, events.HealGaveUp, events.HealEscalated:
		var ref struct {
			Index   int `json:"index"`
			Attempt int `json:"attempt"`
		}
		if json.Unmarshal(d.Event.Data(), &ref) == nil {
			e.stopTimer(flightKey(id, ref.Index, ref.Attempt))
		}
	case events.RunCancelled, events.RunAbandoned:
		e.cancelFlights(id)
		if r.Paused != nil && r.Paused.ConfirmID != "" {
			if err := e.closeConfirmation(ctx, r.Paused.ConfirmID, endedReason(r, d.Event)); err != nil {
				return nil, err // redelivered: the close is written once (its id)
			}
		}
	case events.RunStepCompleted, events.RunStepFailed:
		var ref struct {
			Index   int `json:"index"`
			Attempt int `json:"attempt"`
		}
		if json.Unmarshal(d.Event.Data(), &ref) == nil {
			e.mu.Lock()
			delete(e.inflight, flightKey(id, ref.Index, ref.Attempt))
			e.mu.Unlock()
		}
	}
	unbacked, err := e.unbackedResumes(ctx, r)
	if err != nil {
		return nil, err
	}
	dec := e.decide(r, d.Event, unbacked)
	if len(dec.Events) > 0 {
		if err := e.bus.PublishAll(ctx, dec.Events); err != nil {
			e.forget(id) // our local view ran ahead of the log; rebuild next time
			return nil, err
		}
	}
	if r.Terminal() {
		e.done(r)
		return nil, nil
	}
	switch {
	case dec.Launch != nil:
		e.launch(ctx, d, r.ID, dec.Launch)
	case dec.Wait != nil:
		e.startTimer(ctx, d, dec.Wait)
	case events.Type(d.Event.Type()) == events.RunPaused && r.Paused != nil && r.Paused.ConfirmID != "" && len(dec.Events) == 0:
		// The pause's own event, the last the runner wrote for it, is
		// back: the run now waits for someone, maybe for hours.
		e.wait(r.ID, r.Paused.ConfirmID, r.Seqs())
		return nil, nil
	}
	if r.Paused == nil {
		e.moved(r.ID)
	}
	return nil, nil
}

// decide runs the decision with this process's facts: the wall clock and
// the calls in flight here.
func (e *engine) decide(r *runstate.Run, cause *events.Event, unbacked func(int) bool) Decision {
	return e.decider.decide(r, cause, Facts{Now: func() time.Time { return time.Now().UTC() }, Unbacked: unbacked, Calls: func(index, attempt int) CallState {
		e.mu.Lock()
		defer e.mu.Unlock()
		f := e.inflight[flightKey(r.ID, index, attempt)]
		if f == nil {
			return CallNone
		}
		return f.state // written under mu by the call's goroutine
	}})
}

// foreignRequest says why confirmation st cannot stand for step i of run
// r ("" when it can): the first request of an id is the one every reader
// judges answers by, and anyone may ask under an id first (the runner's
// ids are predictable: the run's id, the step, the attempt) with other
// approvers, a default of proceed, a short timeout. The terms that decide
// who may answer and what the deadline answers must be the step's own.
func foreignRequest(r *runstate.Run, i int, st *confirmation.State) string {
	req := st.Request
	if req == nil || r.Skill == nil || i < 0 || i >= len(r.Skill.Steps) || r.Skill.Steps[i].Confirm == nil {
		return ""
	}
	c := r.Skill.Steps[i].Confirm
	var opts []string
	for _, o := range c.Options {
		opts = append(opts, o.Value)
	}
	var got []string
	for _, o := range req.Options {
		got = append(got, o.Value)
	}
	sameQuorum := (req.Quorum == nil) == (c.Quorum == nil)
	if sameQuorum && c.Quorum != nil {
		// Compared field by field: an empty veto list and none are the
		// same (JSON leaves an empty one out).
		sameQuorum = req.Quorum.Required == c.Quorum.Required && slices.Equal(req.Quorum.Veto, c.Quorum.Veto)
	}
	switch {
	case req.Requester != Source || req.RunID != r.ID:
		return fmt.Sprintf("it was asked by %s, not by the runner for this run", req.Requester)
	case !slices.Equal(got, opts) || req.Default != c.Default:
		return "its options or default are not the step's"
	case !slices.Equal(req.Approvers, c.Approvers) || !sameQuorum:
		return "its approvers or quorum are not the step's"
	case req.TimeoutS != c.Timeout.Seconds():
		return "its timeout is not the step's"
	}
	return ""
}

// failTaken fails step i: its confirmation was asked first by someone
// else (why), so nothing answered there moves the run.
func (e *engine) failTaken(ctx context.Context, r *runstate.Run, i int, cid, why string) error {
	st := &r.Steps[i]
	if st.Status != runstate.StepStarted {
		return nil
	}
	e.log.Warn("a confirmation of the run was asked first by someone else: the step fails", "run", r.ID, "step", st.Name, "confirm", cid, "why", why)
	failed, err := events.NewEvent(events.RunStepFailed, r.ID, r.ID+"/"+stepSuffix(i, st.Attempt, "failed-taken"), Source, events.StepFailedData{
		Step: st.Name, Index: i, Attempt: st.Attempt,
		Error: events.ErrorInfo{Kind: "confirmation_taken", Message: fmt.Sprintf("confirmation %s was asked before the runner asked it (%s): every answer there is judged by that request, so the step cannot go on through it; retry the step to ask again under a new id", cid, why)}})
	if err != nil {
		return err
	}
	if err := e.bus.PublishAll(ctx, []events.Event{failed}); err != nil {
		return err
	}
	return r.Apply(&failed, 0, e.skills)
}

// closeConfirmation answers the confirmation an ended run waited at with
// its safest option (method error, which approvers do not hold back: no
// one decided), so that it leaves every inbox and an answer sent later is
// told who closed it, instead of being taken for one that counts. One
// answered first is left as it is. Done when the run's end comes back
// from the log, so a crash between the end and the close redelivers it.
func (e *engine) closeConfirmation(ctx context.Context, id, reason string) error {
	st, err := confirmation.Load(ctx, e.bus, id)
	if events.CodeOf(err) == events.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Request == nil || !st.Open() {
		return nil
	}
	a := events.ConfirmAnsweredData{Choice: confirmation.SafeChoice(st.Request), Method: events.MethodError, By: Source, Channel: "runner", Reason: reason}
	_, err = confirmation.Answer(ctx, e.bus, Source, id, a, confirmation.FromState{State: st}, confirmation.WithEventID(id+"/answer/run-ended"))
	if err != nil && events.CodeOf(err) != events.CodeConflict && events.CodeOf(err) != events.CodeInvalidRequest {
		return err
	}
	return nil
}

// endedReason says why a run's confirmation closes without an answer.
func endedReason(r *runstate.Run, ev *events.Event) string {
	var d struct {
		By     string `json:"by"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(ev.Data(), &d)
	how := "was abandoned"
	if events.Type(ev.Type()) == events.RunCancelled {
		how = "was cancelled by " + actor(d.By)
	}
	if d.Reason != "" {
		how += " (" + textutil.Cut(d.Reason, 200) + ")"
	}
	return fmt.Sprintf("run %s %s: nothing waits for this answer", r.ID, how)
}

// unbackedResumes checks the answers a run took from resumed events in its
// own log against the confirmations' logs: a run the runner drives goes
// on at a confirmation's answer only, and anyone who may write the run's
// subjects (an agent driving runs of its own) could write a resume or a
// confirm step's completion. The runner's own answers are verified when
// they arrive, so a step holds such an answer only after a write by
// someone else or a reload from the run's log (then once per load): this
// reads nothing for almost every decision. It returns the steps whose
// answer the confirmation does not hold (nil: none).
func (e *engine) unbackedResumes(ctx context.Context, r *runstate.Run) (func(int) bool, error) {
	if !r.Requested || r.Terminal() {
		return nil, nil
	}
	var bad map[int]bool
	for i := range r.Steps {
		s := &r.Steps[i]
		if !s.AnswerFromRun || s.Answer == nil {
			continue
		}
		cid := s.ConfirmID
		if cid == "" {
			cid = ConfirmID(r.ID, i, max(s.Attempt, 1)) // completed before it asked
		}
		st, err := confirmation.LoadVerdicts(ctx, e.bus, cid)
		if err != nil && events.CodeOf(err) != events.CodeNotFound {
			return nil, err
		}
		if st != nil && st.Answer != nil && st.Answer.Choice == s.Answer.Choice {
			// Backed: the confirmation took this choice. Its answer is the
			// one kept (who answered, how), not the resume's word for it.
			a := *st.Answer
			s.Answer, s.AnswerFromRun = &events.ConfirmAnsweredData{Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason}, false
			continue
		}
		if bad == nil {
			bad = map[int]bool{}
		}
		bad[i] = true
		e.log.Warn("a resume with no answer behind it: the run waits at its confirmation", "run", r.ID, "step", s.Name, "confirm", cid, "choice", s.Answer.Choice, "by", s.Answer.By)
	}
	if bad == nil {
		return nil, nil
	}
	return func(i int) bool { return bad[i] }, nil
}

// takesEffect judges an answer the way every reader of the log does (the
// first valid answer in log order takes effect; see lib/confirmation) and
// reports whether it is the answer of a confirmation of run id. Refused
// answers are left alone: the confirm router reports them.
func (e *engine) takesEffect(ctx context.Context, id string, d *events.Delivery) (*confirmation.State, error) {
	if events.Type(d.Event.Type()) != events.ConfirmAnswered {
		return nil, nil
	}
	// The verdict alone: one read when the answer's guard proves it came
	// right after the question, else reads of literal subjects, which the
	// server finds from its subject index instead of walking the log.
	st, err := confirmation.LoadAnswerVerdict(ctx, e.bus, d.Event, d.Seq, d.Header())
	if events.CodeOf(err) == events.CodeNotFound {
		return nil, nil // an answer before its question: refused
	}
	if err != nil {
		return nil, err
	}
	a, ok := st.AnswerAt(d.Seq)
	if !ok || a.Refusal != nil || a.Counted || st.Gate.RunID == "" {
		return nil, nil
	}
	if st.Gate.RunID != id {
		// Not the runner's confirmation (its id does not name the run)
		// and the answer does not say which run: the run's own worker
		// must apply it, and this is not that worker.
		e.log.Debug("answer for a run the runner does not map", "confirm", d.Event.Subject(), "run", st.Gate.RunID)
		return nil, nil
	}
	return st, nil
}

// launch runs a tool call in its own goroutine. The delivery that caused it
// stays unacknowledged until the result is in the log, so a crash at any
// point redelivers it and the call is made again with the same
// idempotency key. The sweep launches without a delivery (d nil): then a
// crash leaves the call to the next sweep.
//
// It reports false, and does nothing, when a call of the same attempt is
// running here already or has finished: the handler of a delivery and the
// sweep decide apart, each from what it read, and the one that registers
// the call first makes it.
func (e *engine) launch(ctx context.Context, d *events.Delivery, runID string, l *Launch) bool {
	k := flightKey(runID, l.Index, l.Attempt)
	e.mu.Lock()
	if f := e.inflight[k]; f != nil && (f.state == CallRunning || f.state == CallDone) {
		e.mu.Unlock()
		return false
	}
	fctx, cancel := context.WithCancel(ctx)
	f := &flight{cancel: cancel, state: CallRunning}
	e.inflight[k] = f
	e.mu.Unlock()
	finish, progress := func([]events.Event, error) {}, func() {}
	if d != nil {
		finish, progress = d.Hold(), func() { _ = d.InProgress() }
	}
	call := tool.Call{Tool: l.Step.Tool, Args: l.Args, RunID: runID, Step: l.Step.Name, Attempt: l.Attempt, IdempotencyKey: tool.IdempotencyKey(runID, l.Index, l.Attempt)}
	if d == nil {
		e.detached.Add(1)
	}
	go func() {
		defer cancel()
		if d == nil {
			defer e.detached.Done()
		}
		heartbeat := time.NewTicker(max(e.ackWait/3, 100*time.Millisecond))
		defer heartbeat.Stop()
		settle := func(state CallState, err error) {
			e.mu.Lock()
			f.state = state
			e.mu.Unlock()
			finish(nil, err)
		}
		if l.Delay > 0 {
			t := time.NewTimer(l.Delay)
		wait:
			for {
				select {
				case <-t.C:
					break wait
				case <-heartbeat.C:
					progress()
				case <-fctx.Done():
					t.Stop()
					settle(CallLost, fctx.Err())
					return
				}
			}
		}
		if e.current != nil {
			// After a backoff this instance may have been paused past its
			// lease, its delivery handed to the active instance: then the
			// call is that one's to make.
			if err := e.current(); err != nil {
				// Never made: no flight is left behind, so that a decision
				// from the log (the delivery again, the sweep) launches it
				// rather than take it for a retry waiting out its backoff.
				e.mu.Lock()
				if e.inflight[k] == f {
					delete(e.inflight, k)
				}
				e.mu.Unlock()
				finish(nil, err)
				return
			}
		}
		if l.Start != nil {
			l.Start.SetTime(time.Now().UTC()) // it starts now, after the backoff
			if err := e.bus.PublishAll(ctx, []events.Event{*l.Start}); err != nil {
				settle(CallLost, err)
				return
			}
		}
		results := make(chan tool.Result, 1)
		go func() { results <- e.invoker.Invoke(fctx, call) }()
		var res tool.Result
	run:
		for {
			select {
			case res = <-results:
				break run
			case <-heartbeat.C:
				progress()
			}
		}
		outcome := "completed"
		if res.Err != nil {
			outcome = "failed"
		}
		e.metrics.StepLatency(l.Step.Tool, outcome, res.Duration)
		ev, err := resultEvent(runID, l, res, time.Now().UTC())
		if err != nil {
			e.log.Error("build result event", "run", runID, "err", err)
		}
		if err := e.bus.PublishAll(ctx, []events.Event{ev}); err != nil {
			e.log.Warn("tool result not stored; the call will be made again", "run", runID, "step", l.Step.Name, "err", err)
			settle(CallLost, err)
			return
		}
		settle(CallDone, nil)
	}()
	return true
}

// cancelFlights stops the tool calls of a cancelled run.
func (e *engine) cancelFlights(runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	prefix := runID + "/"
	for k, f := range e.inflight {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			f.cancel()
		}
	}
}

type timer struct {
	t      *time.Timer
	finish func([]events.Event, error)
	once   sync.Once
}

// startTimer holds the delivery and publishes the wait's event when the
// time is up, unless stopTimer comes first. After a crash the held
// delivery comes back and the wait is recomputed from the log's times.
func (e *engine) startTimer(ctx context.Context, d *events.Delivery, w *Wait) {
	e.mu.Lock()
	if _, ok := e.timers[w.Key]; ok {
		e.mu.Unlock()
		return
	}
	tm := &timer{finish: d.Hold()}
	e.timers[w.Key] = tm
	e.mu.Unlock()
	tm.t = time.AfterFunc(w.After, func() {
		e.mu.Lock()
		delete(e.timers, w.Key)
		e.mu.Unlock()
		w.Event.SetTime(time.Now().UTC()) // it happens now, not when the wait was decided
		tm.once.Do(func() { tm.finish([]events.Event{w.Event}, nil) })
	})
}

func (e *engine) stopTimer(key string) {
	e.mu.Lock()
	tm, ok := e.timers[key]
	delete(e.timers, key)
	e.mu.Unlock()
	if ok {
		tm.t.Stop()
		tm.once.Do(func() { tm.finish(nil, nil) })
	}
}

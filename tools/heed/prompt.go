package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/heedhq/heed/lib/textutil"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// promptResult is what the terminal prompt decided and how.
type promptResult struct {
	Choice   string        `json:"choice"`
	Method   string        `json:"method"` // user, override, memory, agent, timeout, error
	By       string        `json:"by"`
	Remember string        `json:"remember,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Counted: the answer is a vote towards the quorum; nothing took
	// effect yet.
	Counted bool `json:"counted,omitempty"`
}

// errNoTerminal is returned when there is nobody to ask.
var errNoTerminal = errors.New("stdin is not a terminal, so nobody can be asked here")

// prompt asks the person at the terminal to answer one confirmation: the
// numbered options, a live countdown with a spinner, Enter for the default,
// a digit for that option, 'a' to remember the choice, Ctrl-C to cancel.
// An answer from any other channel (or the deadline) ends it too.
//
// identity answers, and is present on this terminal while it asks
// (beReachable).
func prompt(ctx context.Context, c *client, st *confirmation.State, identity string, in *os.File, out io.Writer, pal palette) (promptResult, error) {
	start := time.Now()
	if !term.IsTerminal(int(in.Fd())) {
		return promptResult{}, errNoTerminal
	}
	defer beReachable(ctx, c, identity, os.Stderr)()
	req := st.Request
	// Hear answers from elsewhere (another terminal, the web, the router)
	// as the log stored them: only the answer that takes effect ends the
	// prompt, a refused one (a wrong choice, a late one) does not. (A read
	// of the confirmation prompted by a published message could come
	// before the store and miss the answer, and nothing comes after it.)
	answered := make(chan *confirmation.State, 1)
	defer keepWatching(ctx, func(wctx context.Context) bool {
		now, err := c.WaitAnswer(wctx, st.ID)
		if err != nil || now.Answer == nil {
			return false
		}
		answered <- now
		return true
	})()
	// It may have been answered before we subscribed.
	if now, err := c.Confirmation(ctx, st.ID); err == nil && now.Answer != nil {
		return fromAnswer(now.Answer, start), nil
	}

	deadline := st.Deadline()
	def := st.Gate.Default

	w := &crlf{w: out}
	fmt.Fprintln(w)
	if req.Title != "" {
		fmt.Fprintf(w, "%s\n", pal.bold(oneLine(req.Title)))
	}
	// What the requester wrote, made safe to show (textutil: no escape
	// sequences, no direction marks that reorder what a person reads).
	fmt.Fprintln(w, textutil.Lines(strings.TrimRight(req.Message, "\n")))
	for i, o := range req.Options {
		mark := ""
		if o.Value == def {
			mark = pal.dim(" (default)")
		}
		desc := ""
		if o.Description != "" {
			desc = " — " + oneLine(o.Description)
		}
		fmt.Fprintf(w, "  %d) %s%s%s\n", i+1, oneLine(o.Label), mark, desc)
	}
	help := "Enter = default · 1-9 = choose · Ctrl-C = cancel"
	if req.LearnPreference {
		help += " · a = remember for this step"
	}
	fmt.Fprintln(w, help)

	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return promptResult{}, fmt.Errorf("terminal: %w", err)
	}
	defer func() { _ = term.Restore(int(in.Fd()), old) }()
	keys := make(chan byte, 16)
	stopKeys, keysDone := make(chan struct{}), make(chan struct{})
	go readKeys(in, keys, stopKeys, keysDone)
	// The reader must be gone before the prompt returns: one left blocked
	// in a read would take the first key pressed at the next prompt.
	defer func() { close(stopKeys); <-keysDone }()

	remember := ""
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	frame := 0
	draw := func() {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		mem := ""
		if remember != "" {
			mem = "  [remember: always for this step]"
		}
		fmt.Fprintf(out, "\r\033[K%s waiting for your answer — %s left (default: %s)%s", spinnerFrames[frame%len(spinnerFrames)], formatLeft(left), def, mem)
		frame++
	}
	draw()
	choose := func(choice string) (promptResult, error) {
		fmt.Fprint(out, "\r\033[K")
		a, err := c.Answer(ctx, command.AnswerConfirmation{ID: st.ID, Choice: choice, By: identity, Channel: presenceChannel, Remember: remember})
		var late *command.ErrorReply
		if errors.As(err, &late) && late.Answer != nil {
			w := late.Answer
			return promptResult{Choice: w.Choice, Method: w.Method, By: w.By, Duration: time.Since(start)}, nil
		}
		if err != nil {
			return promptResult{}, err
		}
		return promptResult{Choice: a.Choice, Method: a.Method, By: a.By, Remember: remember, Duration: time.Since(start), Counted: a.Counted}, nil
	}
	timedOut := false
	for {
		select {
		case <-ctx.Done():
			fmt.Fprint(out, "\r\033[K")
			return promptResult{}, ctx.Err()
		case now := <-answered:
			fmt.Fprint(out, "\r\033[K")
			return fromAnswer(now.Answer, start), nil
		case k, ok := <-keys:
			if !ok {
				keys = nil
				continue
			}
			switch {
			case k == '\r' || k == '\n':
				return choose(def)
			case k == 3: // Ctrl-C
				if hasValue(req.Options, "cancel") {
					return choose("cancel")
				}
				fmt.Fprint(out, "\r\033[K")
				return promptResult{}, context.Canceled
			case k >= '1' && k <= '9' && int(k-'1') < len(req.Options):
				return choose(req.Options[k-'1'].Value)
			case (k == 'a' || k == 'A') && req.LearnPreference:
				if remember == "" {
					remember = "skill_step"
				} else {
					remember = ""
				}
				draw()
			}
		case <-tick.C:
			if !timedOut && time.Now().After(deadline) {
				timedOut = true
			}
			if timedOut && time.Since(deadline) > 5*time.Second {
				// No router answered the deadline: apply the default here,
				// through the same first-answer gate and with the router's
				// own event id, so only one timeout is ever stored.
				fmt.Fprint(out, "\r\033[K")
				now, err := confirmation.Answer(ctx, c.Bus(), "heed/cli", st.ID, events.ConfirmAnsweredData{
					Choice: def, Method: events.MethodTimeout, By: "heed/cli", Channel: "terminal", Reason: "no answer before the deadline",
				}, confirmation.WithEventID(st.ID+"/answer/timeout"))
				if now != nil && now.Answer != nil {
					return fromAnswer(now.Answer, start), nil
				}
				if err != nil {
					return promptResult{}, err
				}
			}
			draw()
		}
	}
}

// readKeys sends the bytes read from in to keys until stop is closed (or
// in fails). It polls, so that it never sits in a read after stop.
func readKeys(in *os.File, keys chan<- byte, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	fds := []unix.PollFd{{Fd: int32(in.Fd()), Events: unix.POLLIN}}
	b := make([]byte, 1)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, err := unix.Poll(fds, 50)
		if err == unix.EINTR || err == nil && n == 0 {
			continue
		}
		if err == nil {
			n, err = in.Read(b)
		}
		if err != nil || n == 0 {
			close(keys)
			return
		}
		select {
		case keys <- b[0]:
		case <-stop:
			return
		}
	}
}

func fromAnswer(a *events.ConfirmAnsweredData, start time.Time) promptResult {
	return promptResult{Choice: a.Choice, Method: a.Method, By: a.By, Remember: a.Remember, Duration: time.Since(start)}
}

func hasValue(opts []events.Option, v string) bool {
	for _, o := range opts {
		if o.Value == v {
			return true
		}
	}
	return false
}

func formatLeft(d time.Duration) string {
	s := int(d.Seconds() + 0.999)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh %02dm", s/3600, s%3600/60)
	}
}

// clockOrDate is t as a local time of day, with its date when it is not
// today (a deadline may be up to a day away).
func clockOrDate(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05 MST")
	}
	return t.Format("Mon 2 Jan 15:04:05 MST")
}

// crlf writes \r\n for \n: the terminal may be in raw mode.
type crlf struct{ w io.Writer }

func (c *crlf) Write(p []byte) (int, error) {
	_, err := c.w.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n")))
	return len(p), err
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/skill"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newRunCmd(g *globals) *cobra.Command {
	var inputs []string
	var yes, detach, asJSON bool
	var agent, as string
	cmd := &cobra.Command{
		Use:   "run SKILL.yaml",
		Short: "Run a skill and follow it until it ends (exit 0 only if it completed)",
		Long: `Run a skill: the runner executes it as an event-sourced run. heed run prints
each step as it happens (a live line on a terminal, plain lines when piped)
and waits for the run to end. At a confirm step it shows the question; answer
it here (on a terminal), from anywhere with 'heed confirm answer', or not at
all with --yes. Without a terminal it prints the choices, the deadline and
the exact 'heed confirm answer' line, and waits until the deadline (then the
step's default applies).

With --json the progress goes to standard error and, once the run ends, its
state (as heed status RUN-ID --json prints it) to standard output; with
--detach --json, the run id.

Exit status: 0 completed; 3 the run ended without completing (failed,
cancelled, or abandoned after the runner's idle time), with its state on the
last line; 2 a bad skill or input (nothing started); 1 heed could not start
or follow it; 130 interrupted (Ctrl-C: the run goes on without you).`,
		Example: `  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567
  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567 --yes
  heed run skills/scale_down.yaml -i name=backend -i replicas=1 --detach
  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567 --yes --json | jq .status`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSkillFiles(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			src, err := readFile(args[0])
			if err != nil {
				return badInput("%v", err)
			}
			if _, err := skill.Load(args[0], src); err != nil {
				return badInput("the skill has errors:\n%v", err)
			}
			in, err := parseKV(inputs, false)
			if err != nil {
				return err
			}
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			reply, err := c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{Source: string(src), File: args[0]}, Inputs: in, Yes: yes, Agent: agent, RequestedBy: whoami()})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if detach {
					printJSON(out, reply)
					return nil
				}
				// The progress is for people: standard error.
				out = cmd.ErrOrStderr()
			}
			fmt.Fprintf(out, "run %s started (heed audit %s)\n", reply.RunID, reply.RunID)
			if detach {
				return nil
			}
			if as == "" {
				as = whoami()
			}
			err = follow(ctx, c, reply.RunID, as, out, g.noColor)
			if asJSON {
				var ee *exitError
				if err == nil || errors.As(err, &ee) && ee.status != exitInterrupted {
					if r, rerr := c.Run(ctx, reply.RunID); rerr == nil {
						printJSON(cmd.OutOrStdout(), r)
					}
				}
			}
			return err
		},
	}
	cmd.Flags().StringArrayVarP(&inputs, "input", "i", nil, "input as key=value (repeatable)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "answer every confirmation with proceed (override)")
	cmd.Flags().BoolVar(&detach, "detach", false, "return at once, saying the run started (with --json, the run id alone)")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent that owns the run (answers ai_assist questions)")
	cmd.Flags().StringVar(&as, "as", "", "who answers at the prompt, and is reachable for escalations while it asks (default $HEED_IDENTITY, else the current user)")
	_ = cmd.RegisterFlagCompletionFunc("as", cobra.NoFileCompletions)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run's final state as JSON (progress on standard error)")
	_ = cmd.RegisterFlagCompletionFunc("input", completeInputs)
	_ = cmd.RegisterFlagCompletionFunc("agent", cobra.NoFileCompletions)
	return cmd
}

// follow prints a run's events until it ends and returns its exit status.
// identity answers at the prompt (and is reachable while it asks).
func follow(ctx context.Context, c *client, runID, identity string, out io.Writer, noColor bool) error {
	tty := isTerminal(out)
	p := &progress{out: out, tty: tty, pal: paletteFor(out, noColor)}
	interactive := tty && term.IsTerminal(int(os.Stdin.Fd()))
	defer p.clear()
	stopSpin := p.spin()
	defer stopSpin()
	stopRemind := p.remind(time.Minute)
	defer stopRemind()
	code := -1
	err := c.FollowRun(ctx, runID, func(ev *events.Event) (bool, error) {
		// waiting is the open confirmation the run is paused at, to say
		// how to answer it and until when (nil: already answered).
		var waiting *confirmation.State
		var waitErr error
		if events.Type(ev.Type()) == events.RunPaused {
			var pd events.RunPausedData
			if json.Unmarshal(ev.Data(), &pd) == nil && pd.Reason == events.PauseAwaitingConfirmation {
				st, err := c.Confirmation(ctx, pd.ConfirmID)
				waitErr = err
				if err == nil && st.Open() {
					waiting = st
				}
				if interactive && waiting != nil {
					p.lock()
					p.current = ""
					p.clear()
					res, err := prompt(ctx, c, st, identity, os.Stdin, out, p.pal)
					if err == nil {
						p.line("→ %s (%s by %s, %s)", res.Choice, res.Method, res.By, humanDuration(res.Duration))
						p.unlock()
						return false, nil
					}
					// Not answered here: say why, then show the pause and
					// how to answer it from elsewhere instead of going quiet.
					if !errors.Is(err, context.Canceled) {
						p.line("✗ the answer was not recorded: %v", err)
					}
					p.unlock()
				}
			}
		}
		if waiting != nil && !interactive {
			waiting = unlessAnsweredSoon(ctx, c, waiting)
		}
		status, done := p.event(ev)
		if done {
			code = status
		}
		switch {
		case waiting != nil:
			p.awaiting(waiting, time.Now())
		case waitErr != nil:
			var pd events.RunPausedData
			_ = json.Unmarshal(ev.Data(), &pd)
			p.line("  waiting for an answer: heed confirm answer %s CHOICE   (heed confirm show %s lists the choices)", pd.ConfirmID, pd.ConfirmID)
		}
		return done, nil
	})
	if ctx.Err() != nil {
		return &exitError{status: exitInterrupted, msg: fmt.Sprintf("stopped following; run %s goes on (heed audit %s)", runID, runID)}
	}
	if err != nil {
		return err
	}
	if code == exitOK {
		return nil
	}
	// The run's last line said how it ended.
	return &exitError{status: code}
}

// answerSettle is how long a pause may be answered by the confirm
// router's fast layers (--yes, a rule, a remembered choice: milliseconds)
// before heed run tells a person how to answer it.
const answerSettle = 300 * time.Millisecond

// unlessAnsweredSoon returns st's confirmation if it is still open after
// answerSettle, or nil once it is answered.
func unlessAnsweredSoon(ctx context.Context, c *client, st *confirmation.State) *confirmation.State {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	settle := time.NewTimer(answerSettle)
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return st
		case <-settle.C:
			return st
		case <-tick.C:
			if now, err := c.Confirmation(ctx, st.ID); err == nil && !now.Open() {
				return nil
			}
		}
	}
}

// progress renders run events for a person.
type progress struct {
	out     io.Writer
	tty     bool
	pal     palette
	current string
	since   time.Time
	waiting *confirmation.State // the open confirmation the run waits on
	mu      sync.Mutex
}

// confirmDeadline is when a confirmation's default applies.
func confirmDeadline(st *confirmation.State) time.Time { return st.Deadline() }

// awaiting says, when nobody is asked at this terminal, what the run waits
// for, until when, and the ways to answer: heed run never sits silent.
func (p *progress) awaiting(st *confirmation.State, now time.Time) {
	p.lock()
	defer p.unlock()
	p.waiting = st
	def := st.Gate.Default
	var choices []string
	for _, o := range st.Request.Options {
		c := o.Value
		if o.Value == def {
			c += " (default)"
		}
		choices = append(choices, c)
	}
	deadline := confirmDeadline(st)
	p.line("  choices: %s", strings.Join(choices, ", "))
	p.line("  waiting for an answer until %s (%s left); then the default, %s, applies", clockOrDate(deadline, now), formatLeft(deadline.Sub(now)), def)
	choice := confirmation.ProceedChoice(st.Request)
	if choice == "" {
		choice = "CHOICE"
	}
	p.line("  answer from another terminal: heed confirm answer %s %s   (or: heed confirm %s, to be asked)", st.ID, choice, st.ID)
	p.line("  or start the run with --yes to proceed without being asked")
}

// remind repeats, every interval while the run waits on a confirmation,
// how long is left: a log or a script shows that heed run still waits.
func (p *progress) remind(every time.Duration) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				p.lock()
				if st := p.waiting; st != nil {
					left := confirmDeadline(st).Sub(now)
					if left < 0 {
						left = 0
					}
					p.line("  still waiting for an answer to %s: %s left (default: %s)", st.ID, formatLeft(left), st.Gate.Default)
				}
				p.unlock()
			}
		}
	}()
	return func() { close(stop) }
}

func (p *progress) lock()   { p.mu.Lock() }
func (p *progress) unlock() { p.mu.Unlock() }

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// spin redraws the live line on a terminal while a step runs.
func (p *progress) spin() func() {
	if !p.tty {
		return func() {}
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
				p.lock()
				if p.current != "" {
					fmt.Fprintf(p.out, "\r\033[K%s %s (%s)", spinnerFrames[i%len(spinnerFrames)], p.current, humanDuration(time.Since(p.since).Round(100*time.Millisecond)))
				}
				p.unlock()
			}
		}
	}()
	return func() { close(stop) }
}

func (p *progress) clear() {
	if p.tty {
		fmt.Fprint(p.out, "\r\033[K")
	}
}

func (p *progress) line(format string, args ...any) {
	if p.tty {
		fmt.Fprint(p.out, "\r\033[K")
	}
	fmt.Fprintf(p.out, format+"\n", args...)
}

// event prints one event; done is true when the run ended.
func (p *progress) event(ev *events.Event) (code int, done bool) {
	p.lock()
	defer p.unlock()
	var d map[string]any
	_ = json.Unmarshal(ev.Data(), &d)
	str := func(k string) string {
		if v, ok := d[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	switch events.Type(ev.Type()) {
	case events.RunStarted:
		if steps, ok := d["steps"].([]any); ok {
			p.line("skill %s: %d steps", str("skill"), len(steps))
		}
		if issues, ok := d["known_issues"].([]any); ok && len(issues) > 0 {
			p.line("known issues to watch for:")
			for _, it := range issues {
				if m, ok := it.(map[string]any); ok {
					// The fix id tells apart fixes of one error for different
					// failed values, which read the same otherwise.
					id := ""
					if f, ok := m["fix_id"].(string); ok && f != "" {
						id = " (" + f + ")"
					}
					p.line("  - %s: %v → %v%s", m["tool"], m["pattern"], m["description"], id)
				}
			}
		}
	case events.RunWarning:
		p.line("%s %s: %s", p.pal.paint(sgrYellow, "⚠"), str("step"), str("message"))
	case events.HealTriggered:
		cls := ""
		if c, ok := d["classification"].(map[string]any); ok {
			cls = fmt.Sprint(c["kind"])
		}
		p.line("⚕ healing %s: %s error, plan %s", str("step"), cls, str("plan"))
	case events.HealFixApplied:
		if f, ok := d["fix"].(map[string]any); ok {
			p.line("⚕ fix %v applied (ok: %s)", f["tool"], str("ok"))
		}
	case events.HealRetried:
		p.line("⚕ retrying %s as attempt %s", str("step"), str("next_attempt"))
	case events.HealHealed:
		p.line("⚕ healed %s (%s)", str("step"), str("via"))
	case events.HealGaveUp:
		p.line("⚕ not healed: %s", str("reason"))
	case events.HealEscalated:
		p.line("⚕ handed to the agent %s: %s", str("agent"), str("question"))
	case events.RunStepStarted:
		p.current, p.since = str("step"), time.Now()
		if a := str("attempt"); a != "1" && a != "" {
			p.current += " (attempt " + a + ")"
		}
		if !p.tty {
			p.line("… %s", p.current)
		}
	case events.RunStepCompleted:
		p.current = ""
		took := ""
		if ms := msDuration(d["duration_ms"]); ms != "" {
			took = " " + p.pal.dim("("+ms+")")
		}
		p.line("%s %s%s  %s", p.pal.green("✓"), str("step"), took, truncate(oneLineJSON(d["output"]), 80))
	case events.RunStepFailed:
		p.current = ""
		msg := ""
		if e, ok := d["error"].(map[string]any); ok {
			msg = fmt.Sprint(e["message"])
		}
		p.line("%s %s (attempt %s): %s", p.pal.red("✗"), str("step"), str("attempt"), truncate(firstLine(msg), 200))
	case events.RunStepSkipped:
		p.line("- %s skipped: %s", str("step"), str("reason"))
	case events.RunPaused:
		p.current = ""
		if str("reason") == events.PauseAwaitingConfirmation {
			p.line("%s %s: %s", p.pal.paint(sgrYellow, "?"), str("step"), strings.TrimRight(str("message"), "\n"))
		} else {
			p.line("… paused: %s", str("reason"))
		}
	case events.RunResumed:
		p.waiting = nil
		p.line("→ resumed at %s: %s (%s by %s)", str("step"), str("choice"), str("method"), str("by"))
	case events.RunCompleted:
		p.current = ""
		p.waiting = nil
		p.line("run %s in %s", p.pal.status("completed"), msDuration(d["duration_ms"]))
		if s := str("summary"); s != "" {
			p.line("%s", strings.TrimRight(s, "\n"))
		}
		return exitOK, true
	case events.RunFailed:
		p.current = ""
		p.waiting = nil
		msg := ""
		if e, ok := d["error"].(map[string]any); ok {
			msg = fmt.Sprint(e["message"])
		}
		p.line("run %s at %s: %s", p.pal.status("failed"), str("step"), msg)
		return exitNotCompleted, true
	case events.RunCancelled:
		p.current = ""
		p.waiting = nil
		p.line("run %s by %s: %s", p.pal.status("cancelled"), str("by"), str("reason"))
		return exitNotCompleted, true
	case events.RunAbandoned:
		p.current = ""
		p.waiting = nil
		p.line("run %s: %s", p.pal.status("abandoned"), str("reason"))
		return exitNotCompleted, true
	}
	return 0, false
}

func oneLineJSON(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return firstLine(s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

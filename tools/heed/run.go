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
	"github.com/heedhq/heed/lib/skill"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Exit statuses of `heed run`.
const (
	exitCompleted = 0
	exitFailed    = 1
	exitUsage     = 2
	exitCancelled = 3
	exitAbandoned = 4
)

func newRunCmd(g *globals) *cobra.Command {
	var inputs []string
	var yes, detach, asJSON bool
	var agent string
	cmd := &cobra.Command{
		Use:   "run SKILL.yaml",
		Short: "Run a skill and follow it until it ends (exit 0 only if it completed)",
		Long: `Run a skill: the runner executes it as an event-sourced run. heed run prints
each step as it happens (a live line on a terminal, plain lines when piped)
and waits for the run to end. At a confirm step it shows the question; answer
it here or from anywhere with 'heed confirm answer'.

With --json the progress goes to standard error and, once the run ends, its
state (as heed status RUN-ID --json prints it) to standard output; with
--detach --json, the run id.

Exit status: 0 completed, 1 failed, 2 bad skill or input, 3 cancelled,
4 abandoned (no event for the runner's idle time).`,
		Example: `  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567
  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567 --yes
  heed run skills/scale_down.yaml -i name=backend -i replicas=1 --detach
  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567 --yes --json | jq .status`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSkillFiles(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			src, err := os.ReadFile(args[0])
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			if _, err := skill.Load(args[0], src); err != nil {
				return &exitError{code: exitUsage, msg: "the skill has errors:\n" + err.Error()}
			}
			in, err := parseKV(inputs, false)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			reply, err := c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{Source: string(src), File: args[0]}, Inputs: in, Yes: yes, Agent: agent, RequestedBy: whoami()})
			if err != nil {
				if events.CodeOf(err) == events.CodeInvalidRequest {
					return &exitError{code: exitUsage, msg: err.Error()}
				}
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
			err = follow(ctx, c, reply.RunID, out, g.noColor)
			if asJSON {
				var ee *exitError
				if err == nil || errors.As(err, &ee) && ee.code != 130 {
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
	cmd.Flags().BoolVar(&detach, "detach", false, "print the run id and return at once")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent that owns the run (answers ai_assist questions)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run's final state as JSON (progress on standard error)")
	_ = cmd.RegisterFlagCompletionFunc("input", completeInputs)
	_ = cmd.RegisterFlagCompletionFunc("agent", cobra.NoFileCompletions)
	return cmd
}

// follow prints a run's events until it ends and returns its exit status.
func follow(ctx context.Context, c *client, runID string, out io.Writer, noColor bool) error {
	tty := isTerminal(out)
	p := &progress{out: out, tty: tty, pal: paletteFor(out, noColor)}
	interactive := tty && term.IsTerminal(int(os.Stdin.Fd()))
	defer p.clear()
	stopSpin := p.spin()
	defer stopSpin()
	code := -1
	err := c.FollowRun(ctx, runID, func(ev *events.Event) (bool, error) {
		if interactive && events.Type(ev.Type()) == events.RunPaused {
			var pd events.RunPausedData
			if json.Unmarshal(ev.Data(), &pd) == nil && pd.Reason == events.PauseAwaitingConfirmation {
				if st, err := c.Confirmation(ctx, pd.ConfirmID); err == nil && st.Open() {
					p.lock()
					p.current = ""
					p.clear()
					res, err := prompt(ctx, c, st, os.Stdin, out, p.pal)
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
		status, done := p.event(ev)
		if done {
			code = status
		}
		return done, nil
	})
	if ctx.Err() != nil {
		return &exitError{code: 130, msg: fmt.Sprintf("stopped following; run %s goes on (heed audit %s)", runID, runID)}
	}
	if err != nil {
		return err
	}
	if code == exitCompleted {
		return nil
	}
	return &exitError{code: code}
}

// progress renders run events for a person.
type progress struct {
	out     io.Writer
	tty     bool
	pal     palette
	current string
	since   time.Time
	mu      sync.Mutex
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
					p.line("  - %s: %v → %v", m["tool"], m["pattern"], m["description"])
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
			p.line("%s %s: %s", p.pal.paint(sgrYellow, "?"), str("step"), str("message"))
			p.line("  waiting for an answer: heed confirm answer %s <choice>   (or heed confirm show %s)", str("confirm_id"), str("confirm_id"))
		} else {
			p.line("… paused: %s", str("reason"))
		}
	case events.RunResumed:
		p.line("→ resumed at %s: %s (%s by %s)", str("step"), str("choice"), str("method"), str("by"))
	case events.RunCompleted:
		p.current = ""
		p.line("run %s in %s", p.pal.status("completed"), msDuration(d["duration_ms"]))
		if s := str("summary"); s != "" {
			p.line("%s", strings.TrimRight(s, "\n"))
		}
		return exitCompleted, true
	case events.RunFailed:
		p.current = ""
		msg := ""
		if e, ok := d["error"].(map[string]any); ok {
			msg = fmt.Sprint(e["message"])
		}
		p.line("run %s at %s: %s", p.pal.status("failed"), str("step"), msg)
		return exitFailed, true
	case events.RunCancelled:
		p.current = ""
		p.line("run %s by %s: %s", p.pal.status("cancelled"), str("by"), str("reason"))
		return exitCancelled, true
	case events.RunAbandoned:
		p.current = ""
		p.line("run %s: %s", p.pal.status("abandoned"), str("reason"))
		return exitAbandoned, true
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

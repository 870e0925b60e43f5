package main

import (
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/spf13/cobra"
)

// runStatuses are the values of runs --status.
var runStatuses = []string{runstate.StatusRequested, runstate.StatusRunning, runstate.StatusPaused,
	runstate.StatusCompleted, runstate.StatusFailed, runstate.StatusCancelled, runstate.StatusAbandoned}

// oneOf checks a flag's value against its choices: an error with code
// invalid_request that lists them, and the closest, otherwise.
func oneOf(flag, value string, choices []string) error {
	for _, c := range choices {
		if value == c {
			return nil
		}
	}
	return badInput("%s %q: use one of %s%s", flag, value, strings.Join(choices, ", "), textutil.Hint(value, choices))
}

// checkFilter checks a subject filter for events tail: a valid NATS
// subject filter that some of heed's events (or dead letters) can match,
// so that a typo is refused instead of waiting forever for nothing.
func checkFilter(filter string) error {
	toks := strings.Split(filter, ".")
	for i, t := range toks {
		switch {
		case t == "" || strings.ContainsAny(t, " \t\r\n"):
			return badInput("%q is not a subject filter: empty token or white space (e.g. 'heed.run.*.step.failed')", filter)
		case t == ">" && i != len(toks)-1:
			return badInput("%q is not a subject filter: '>' must be the last token", filter)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return badInput("%q is not a subject filter: '*' and '>' stand for whole tokens", filter)
		}
	}
	known := append(events.EventSubjects(), events.DLQPrefix+".>")
	for _, s := range known {
		if subjectsOverlap(filter, s) {
			return nil
		}
	}
	return badInput("%q matches none of heed's subjects (%s)", filter, strings.Join(known, ", "))
}

// subjectsOverlap reports whether some subject matches both filters.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i < len(at) && at[i] == ">": // one or more tokens
			return i < len(bt)
		case i < len(bt) && bt[i] == ">":
			return i < len(at)
		case i == len(at) || i == len(bt):
			return false
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}

// flatten puts a multi-line error (a YAML parser's list) on one line.
func flatten(err error) string {
	var b strings.Builder
	for i, l := range strings.Split(err.Error(), "\n") {
		if i > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(strings.TrimSpace(l))
	}
	return b.String()
}

// idArg checks that the command's first argument is an id (a run's, a
// confirmation's) before anything is sent: one clear line instead of the
// schema's pattern.
func idArg(kind string) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > 0 && !events.ValidID(args[0]) {
			return badInput("%q is not a valid %s id (letters, digits, '-' and '_'; heed runs and heed confirm list show them)", args[0], kind)
		}
		return nil
	}
}

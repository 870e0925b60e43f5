package events

import (
	"os"
	"strings"
)

// DefaultNATSURL is where heed up listens, and where every heed program
// looks for NATS unless told otherwise.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATSURL is the NATS URL a heed program uses: flagValue (its --nats-url)
// if set, else $HEED_NATS_URL, else DefaultNATSURL.
func NATSURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("HEED_NATS_URL"); v != "" {
		return v
	}
	return DefaultNATSURL
}

// Subject layout. Every event lives at heed.<kind>.<aggregate-id>.<verb>, so
// one aggregate can be tailed (heed.run.<id>.>) and one kind of event
// watched across aggregates (heed.run.*.step.failed).
const (
	// Prefix is the first token of every heed subject.
	Prefix = "heed"
	// DLQPrefix is where messages that are not valid heed events go.
	DLQPrefix = "heed.dlq"
	// SchedulePrefix holds server-side message schedules (deadlines). It is
	// captured by the event stream but never consumed as events.
	SchedulePrefix = "heed.schedule"
	// CommandPrefix is for request/reply commands; never captured by a stream.
	CommandPrefix = "heed.cmd"
	// ToolPrefix is for request/reply tools; never captured by a stream.
	ToolPrefix = "heed.tool"
	// ServiceSourcePrefix begins the CloudEvents source of what heed's
	// services write (heed/runner, heed/confirm-router, …). A command
	// writes under its caller's name and refuses one with this prefix, so
	// a source that has it came from a service.
	ServiceSourcePrefix = "heed/"
	// RunnerSource is the skill runner's source: a confirmation requested
	// under it was asked by the runner at a skill's confirm step.
	RunnerSource = "heed/runner"
)

// EventKinds are the aggregate kinds; each has its subject tree
// heed.<kind>.> in the event stream.
var eventKinds = []string{"run", "confirm", "pref", "fix", "escalation", "changeset"}

// EventKinds returns the aggregate kinds that carry events.
func EventKinds() []string { return append([]string(nil), eventKinds...) }

// EventSubjects returns the filter subjects that cover every event.
func EventSubjects() []string {
	out := make([]string, 0, len(eventKinds))
	for _, k := range eventKinds {
		out = append(out, Prefix+"."+k+".>")
	}
	return out
}

// Kind is the aggregate kind of the type: "run" for heed.run.step.failed.
func (t Type) Kind() string {
	kind, _ := t.split()
	return kind
}

// Verb is the part after the kind: "step.failed" for heed.run.step.failed.
func (t Type) Verb() string {
	_, verb := t.split()
	return verb
}

func (t Type) split() (kind, verb string) {
	rest, ok := strings.CutPrefix(string(t), Prefix+".")
	if !ok {
		return "", ""
	}
	kind, verb, _ = strings.Cut(rest, ".")
	return kind, verb
}

// Subject returns the NATS subject of an event of type t about aggregate id.
func (t Type) Subject(id string) string {
	kind, verb := t.split()
	return Prefix + "." + kind + "." + id + "." + verb
}

// SubjectFilter returns the filter for every event of one aggregate.
func SubjectFilter(kind, id string) string {
	return Prefix + "." + kind + "." + id + ".>"
}

// ParseSubject splits an event subject into its kind, aggregate id and verb.
func ParseSubject(subject string) (kind, id, verb string, ok bool) {
	rest, found := strings.CutPrefix(subject, Prefix+".")
	if !found {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// TypeOf returns the type an event subject implies.
func TypeOf(subject string) (Type, bool) {
	kind, _, verb, ok := ParseSubject(subject)
	if !ok {
		return "", false
	}
	return Type(Prefix + "." + kind + "." + verb), true
}

// MaxIDLength bounds aggregate ids.
const MaxIDLength = 128

// ValidID reports whether id can be an aggregate id: one subject token of
// letters, digits, '-' and '_', starting with a letter or digit.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

package command

import (
	"strconv"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
)

// Change-set commands, served by the changesets service
// (docs/CHANGESETS.md).
const (
	ChangeSetPropose = events.CommandPrefix + ".changeset.propose"
	ChangeSetDecide  = events.CommandPrefix + ".changeset.decide"
	ChangeSetStatus  = events.CommandPrefix + ".changeset.status"
	ChangeSetList    = events.CommandPrefix + ".changeset.list"
	ChangeSetHistory = events.CommandPrefix + ".changeset.history"
)

// ProposedCall is one call of a deferred tool an agent wants to make.
// Summary is what a person reads ("Set estimate to 2h"); without one, heed
// writes one from the tool's summary template, else from the tool and its
// args. Before is what the agent saw of what the call changes.
type ProposedCall struct {
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args,omitempty"`
	Summary string         `json:"summary,omitempty"`
	Before  map[string]any `json:"before,omitempty"`
}

// ProposeChangeSet proposes one agent wake's deferred calls for review
// (heed.cmd.changeset.propose). ID is optional: a repeated proposal with
// the same id and content returns the existing set, with other content it
// is refused (conflict); an expired or decided set is never proposed again.
// ExpiresS defaults to the service's expiry (7 days).
type ProposeChangeSet struct {
	ID         string         `json:"id,omitempty"`
	Agent      string         `json:"agent"`
	Subject    string         `json:"subject"`
	Wake       string         `json:"wake,omitempty"`
	RunID      string         `json:"run_id,omitempty"`
	Title      string         `json:"title,omitempty"`
	Calls      []ProposedCall `json:"calls"`
	ExpiresS   float64        `json:"expires_s,omitempty"`
	Reviewers  []string       `json:"reviewers,omitempty"`
	ProposedBy string         `json:"proposed_by,omitempty"`
}

// ChangeItemRef is one queued item as the proposer learns it.
type ChangeItemRef struct {
	ID      string `json:"id"` // <set-id>/<item>
	Item    int    `json:"item"`
	Tool    string `json:"tool"`
	Summary string `json:"summary"`
	From    string `json:"from,omitempty"`
}

// ProposedSet is one set a proposal made.
type ProposedSet struct {
	ID        string          `json:"id"`
	Items     []ChangeItemRef `json:"items"`
	ExpiresAt time.Time       `json:"expires_at"`
}

// ProposeReply names the sets written (more than one when the proposal
// had more than events.MaxChangeItems items) and every item queued.
type ProposeReply struct {
	Sets []ProposedSet `json:"sets"`
	// Queued is the number of items, Message says so for the agent
	// ("7 changes queued for review in cs-…").
	Queued  int    `json:"queued"`
	Message string `json:"message"`
}

// DecideChangeSet decides items of a set (heed.cmd.changeset.decide):
// Items by number, or All for every item still pending (confirm all).
// Verdict is confirmed, rejected or deferred; By who decided, Channel
// where (cli, terminal, web, desktop, slack, mcp...).
type DecideChangeSet struct {
	ID      string `json:"id"`
	Items   []int  `json:"items,omitempty"`
	All     bool   `json:"all,omitempty"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by"`
	Channel string `json:"channel,omitempty"`
}

// ItemDecided is one item's decision as a reply reports it.
type ItemDecided struct {
	Item    int    `json:"item"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by"`
	Channel string `json:"channel,omitempty"`
}

// DecideReply says what was decided by this command (Decided) and, for
// items that had a decision already (another channel's, first), what it
// was (Already). Deciding only items that are decided already is a
// conflict.
type DecideReply struct {
	ID      string        `json:"id"`
	EventID string        `json:"event_id,omitempty"`
	Decided []ItemDecided `json:"decided"`
	Already []ItemDecided `json:"already,omitempty"`
	Status  string        `json:"status"`
}

// ChangeSetStatusRequest asks for a set's state (heed.cmd.changeset.status).
type ChangeSetStatusRequest struct {
	ID string `json:"id"`
}

// ChangeItemState is an item with its decision and how far its
// application got.
type ChangeItemState struct {
	events.ChangeItem
	Status     string    `json:"status"` // pending, confirmed, rejected, deferred, expired
	Reason     string    `json:"reason,omitempty"`
	By         string    `json:"by,omitempty"`
	Channel    string    `json:"channel,omitempty"`
	DecidedAt  time.Time `json:"decided_at,omitzero"`
	DecisionID string    `json:"decision_id,omitempty"`
	// Apply is applying, applied or failed for a confirmed item.
	Apply     string            `json:"apply,omitempty"`
	Attempts  int               `json:"attempts,omitempty"`
	Output    any               `json:"output,omitempty"`
	Error     *events.ErrorInfo `json:"error,omitempty"`
	Stale     bool              `json:"stale,omitempty"`
	AppliedAt time.Time         `json:"applied_at,omitzero"`
}

// ChangeSetState is a set folded from its events (lib/changeset): the
// reply of heed.cmd.changeset.status. Status is pending until the first
// decision, partially_resolved while items wait, resolved when every item
// has a verdict, expired when its time ran out first.
type ChangeSetState struct {
	ID         string                       `json:"id"`
	Status     string                       `json:"status"`
	Proposal   events.ChangeSetProposedData `json:"proposal"`
	ProposedAt time.Time                    `json:"proposed_at"`
	Items      []ChangeItemState            `json:"items"`
	ExpiredAt  time.Time                    `json:"expired_at,omitzero"`
	// Refused counts decisions that did not take effect.
	Refused int `json:"refused,omitempty"`
	// Seq is the log position of the last message of the set.
	Seq uint64 `json:"seq"`
	// VerdictSeq is the log position of the set's last message on a
	// subject of one token after the id (heed.changeset.<id>.*: proposed,
	// decided, refused, expired), not its apply.* events: a decision is
	// written only if no other decision came since it read the set
	// (guarded by this on heed.changeset.<id>.*), while the runner's
	// results, which change no verdict, do not make it read again.
	VerdictSeq uint64 `json:"verdict_seq,omitempty"`
}

// ListChangeSets lists sets (heed.cmd.changeset.list): open ones (pending
// or partially resolved) unless All; of one agent and/or subject when set;
// newest first, at most Limit (default 100, at most 1,000). After, a
// previous reply's Next, lists the sets that come after that reply's last
// (the next page: sets proposed since do not shift it).
type ListChangeSets struct {
	Agent   string `json:"agent,omitempty"`
	Subject string `json:"subject,omitempty"`
	All     bool   `json:"all,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	After   string `json:"after,omitempty"`
}

// ListChangeSetsReply is the sets found and how many more there were;
// with more, Next is the After of the next page.
type ListChangeSetsReply struct {
	Sets []ChangeSetState `json:"sets"`
	More int              `json:"more,omitempty"`
	Next string           `json:"next,omitempty"`
}

// ListCursor is the After that continues a list after st: its place in
// the list's order (proposed time, then id).
func ListCursor(st *ChangeSetState) string {
	return strconv.FormatInt(st.ProposedAt.UnixNano(), 10) + "." + st.ID
}

// ParseListCursor reads a ListCursor.
func ParseListCursor(s string) (proposedAt time.Time, id string, ok bool) {
	ns, id, found := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !found || err != nil || !events.ValidID(id) {
		return time.Time{}, "", false
	}
	return time.Unix(0, n).UTC(), id, true
}

// DecisionHistoryRequest asks for an agent's recent decisions
// (heed.cmd.changeset.history), on one subject when Subject is set: at
// most Limit (default 20) within about BudgetTokens tokens of text
// (default 500; a token counted as 4 bytes).
type DecisionHistoryRequest struct {
	Agent        string `json:"agent"`
	Subject      string `json:"subject,omitempty"`
	Limit        int    `json:"limit,omitempty"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// DecisionHistoryReply is the history as text for an agent's prompt (the
// seed's "Recent User Decisions" block: ✓/✗ lines, newest first) and as
// data. Omitted counts decisions left out by the limit or the budget.
type DecisionHistoryReply struct {
	Agent     string                 `json:"agent"`
	Subject   string                 `json:"subject,omitempty"`
	Text      string                 `json:"text"`
	Tokens    int                    `json:"tokens"`
	Decisions []ChangeDecisionRecord `json:"decisions"`
	Omitted   int                    `json:"omitted,omitempty"`
}

// ChangeDecisionRecord is one decided (or expired) item in an agent's
// history.
type ChangeDecisionRecord struct {
	Set     string         `json:"set"`
	Item    int            `json:"item"`
	Subject string         `json:"subject"`
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args,omitempty"`
	// ArgsTruncated: the args were longer than the history keeps (2 KiB
	// of JSON); their long values are cut to their start (or, with too
	// many keys, Args is {"preview": "<the start of their JSON>…"}).
	ArgsTruncated bool   `json:"args_truncated,omitempty"`
	Summary       string `json:"summary"`
	// Verdict is confirmed, rejected, deferred or expired (no decision).
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason,omitempty"`
	By      string    `json:"by,omitempty"`
	At      time.Time `json:"at"`
	// Applied is applied or failed once a confirmed item was applied;
	// Error says why it failed (stale: its target had changed).
	Applied string `json:"applied,omitempty"`
	Error   string `json:"error,omitempty"`
	Stale   bool   `json:"stale,omitempty"`
}

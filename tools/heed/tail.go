package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func newEventsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Watch the event log", Args: cobra.NoArgs,
		Example: `  heed events tail 'heed.run.*.step.failed'`}
	var asJSON, all bool
	var since time.Duration
	tail := &cobra.Command{
		Use:   "tail [SUBJECT-FILTER]",
		Short: "Print events as they enter the log (e.g. 'heed.run.*.step.failed'; 'heed.dlq.>' for dead letters)",
		Example: `  heed events tail
  heed events tail --all 'heed.run.01kmz3h7q8r2v5x9c4d6e8f0gt.>'
  heed events tail --since 10m 'heed.run.*.step.failed'
  heed events tail 'heed.dlq.>'             # dead letters, with their reason
  heed events tail --json | jq -r .type`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeChoices("heed.run.>", "heed.confirm.>", "heed.heal.>", "heed.pref.>", "heed.fix.>", "heed.escalation.>", "heed.run.*.step.failed", "heed.dlq.>"),
		PreRunE: func(_ *cobra.Command, args []string) error {
			if since < 0 {
				return badInput("--since %s: use a positive duration (e.g. 10m)", since)
			}
			if len(args) == 1 {
				return checkFilter(args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			stream, filters := events.EventStream, events.EventSubjects()
			if len(args) == 1 {
				filters = []string{args[0]}
				if strings.HasPrefix(args[0], events.DLQPrefix) {
					stream = events.DLQStream
				}
			}
			cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverNewPolicy}
			switch {
			case all:
				cfg.DeliverPolicy = jetstream.DeliverAllPolicy
			case since > 0:
				t := time.Now().Add(-since)
				cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
			}
			cons, err := c.Bus().JetStream().OrderedConsumer(ctx, stream, cfg)
			if err != nil {
				return fmt.Errorf("tail %v: %w", filters, err)
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "tailing %s %v (Ctrl-C to stop)\n", stream, filters)
			}
			it, err := cons.Messages()
			if err != nil {
				return err
			}
			go func() { <-ctx.Done(); it.Stop() }()
			for {
				m, err := it.Next()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				meta, _ := m.Metadata()
				raw := events.RawMsg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
				if meta != nil {
					raw.Stored = meta.Timestamp
				}
				if meta != nil {
					raw.Seq = meta.Sequence.Stream
				}
				printRaw(out, c.Bus().Codec(), raw, stream, asJSON)
			}
		},
	}
	tail.Flags().BoolVar(&asJSON, "json", false, "print CloudEvents in JSON format, one per line")
	tail.Flags().BoolVar(&all, "all", false, "start from the beginning of the log")
	tail.Flags().DurationVar(&since, "since", 0, "start this far back (e.g. 10m)")
	cmd.AddCommand(tail)
	return cmd
}

func printRaw(out writer, codec *events.Codec, raw events.RawMsg, stream string, asJSON bool) {
	if stream == events.DLQStream {
		h := raw.Header
		if asJSON {
			b, _ := json.Marshal(map[string]any{
				"subject": raw.Subject, "code": h.Get(events.HeaderDLQCode), "reason": h.Get(events.HeaderDLQReason),
				"original_subject": h.Get(events.HeaderDLQSubject), "original_seq": h.Get(events.HeaderDLQSeq),
				"consumer": h.Get(events.HeaderDLQConsumer), "data": string(raw.Data),
			})
			fmt.Fprintln(out, string(b))
			return
		}
		from := h.Get(events.HeaderDLQSubject)
		if seq := h.Get(events.HeaderDLQSeq); seq != "" {
			from += " seq " + seq
		} else {
			from += ", a command sent without a reply subject" // no stream position
		}
		fmt.Fprintf(out, "%-6d %s  DEAD LETTER %s  %s  (from %s)\n", raw.Seq, h.Get(events.HeaderDLQTime),
			h.Get(events.HeaderDLQCode), h.Get(events.HeaderDLQReason), from)
		return
	}
	ev, err := codec.DecodeStored(raw)
	if err != nil {
		if asJSON {
			b, _ := json.Marshal(map[string]any{"subject": raw.Subject, "seq": raw.Seq, "invalid": string(events.CodeOf(err)), "reason": err.Error()})
			fmt.Fprintln(out, string(b))
			return
		}
		fmt.Fprintf(out, "%-6d %-12s %-40s INVALID %v\n", raw.Seq, "", raw.Subject, err)
		return
	}
	if asJSON {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(out, string(b))
		return
	}
	fmt.Fprintf(out, "%-6d %s  %-22s %-28s %s\n", raw.Seq, ev.Time().Local().Format("15:04:05.000"), shortType(ev.Type()), ev.Subject(), summarize(ev))
}

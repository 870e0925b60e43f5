package main

import (
	"errors"
	"fmt"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/nats-io/nats.go"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/tools/bridge"
	"github.com/heedhq/heed/tools/bridge/desktop"
	"github.com/spf13/cobra"
)

func newDesktopCmd(g *globals) *cobra.Command {
	var as, routes, logLevel, metricsListen string
	var dialog, sound bool
	cmd := &cobra.Command{
		Use:   "desktop",
		Short: "Answer confirmations and escalations from desktop notifications or dialogs",
		Long: `heed desktop runs as the person, in their desktop session: each pending
confirmation or escalation offered to them becomes a notification with one
button per option (notify-send, through the session's notification daemon),
or a Zenity (else kdialog) list dialog when the daemon shows no buttons,
with --dialog, or when the request asks for one. The deadline is the
notification's expiry and the dialog's timeout; an answer given elsewhere
replaces the notification with who answered, and closes a dialog. Answers
carry the identity (--as) and channel desktop. A routing file chooses
which requests come here (docs/BRIDGES.md).`,
		Example: `  heed desktop --as alice
  heed desktop --as alice --routes desktop-routes.yaml --sound
  heed desktop --as alice --dialog`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := service.ParseLogLevel(logLevel); err != nil {
				return err
			}
			who := as
			if who == "" {
				who = whoami()
			}
			var routing bridge.Routing
			if routes != "" {
				r, err := bridge.ReadRouting(routes)
				if err != nil {
					return &exitError{status: exitUsage, code: events.CodeOf(err), msg: events.Message(err)}
				}
				routing = r
			}
			cfg := desktop.Config{Identity: who, Routing: routing, Dialog: dialog, Sound: sound, Log: g.logger(logLevel)}
			b, err := desktop.Detect(cmd.Context(), cfg)
			if err != nil {
				return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: err.Error()}
			}
			// A bridge outlives NATS restarts: reconnect for as long as
			// it runs (the watch is taken up again after a reconnect).
			c, err := g.connect(cmd.Context(), heedclient.NATSOptions{nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)})
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := serveOps(cmd.Context(), cmd.ErrOrStderr(), metricsListen, "desktop", c.Conn(), cfg.Log); err != nil {
				return err
			}
			how := "notifications with buttons"
			if b.Notify == "" {
				how = fmt.Sprintf("%s dialogs (%s)", b.Dialog, b.Why)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "heed desktop: asking %s with %s (Ctrl-C to stop)\n", who, how)
			err = desktop.Run(cmd.Context(), c.Client, cfg, b)
			if errors.Is(err, cmd.Context().Err()) {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "who answers (default $HEED_IDENTITY, else the current user); also reachable for escalations as this identity on channel desktop")
	cmd.Flags().StringVar(&routes, "routes", "", "routing file: which requests come to this desktop (YAML; docs/BRIDGES.md)")
	cmd.Flags().BoolVar(&dialog, "dialog", false, "always ask with a dialog (zenity, else kdialog), never a notification")
	cmd.Flags().BoolVar(&sound, "sound", false, "play the desktop's question sound with each new request")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	addMetricsFlag(cmd, &metricsListen)
	_ = cmd.RegisterFlagCompletionFunc("as", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("routes", completeYAML)
	_ = cmd.RegisterFlagCompletionFunc("log-level", completeChoices("debug", "info", "warn", "error"))
	return cmd
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/tools/bridge"
	"github.com/heedhq/heed/tools/bridge/chat"
	"github.com/nats-io/nats.go"
	"github.com/slack-go/slack"
	"github.com/spf13/cobra"
)

func newChatCmd(g *globals) *cobra.Command {
	var logLevel string
	cmd := &cobra.Command{
		Use:   "chat CONFIG",
		Short: "Post pending requests to Slack and take the answers from its buttons",
		Long: `heed chat posts each pending confirmation or escalation its routes take to a
Slack channel (Block Kit: title, message, skill, step, run, risk, tier,
deadline, one button per option), takes the clicks at its HTTP endpoint
(POST /slack/actions on the config's listen address; verified with the
signing secret, at most 5 minutes old), maps the Slack user to a heed
identity (the config's users) and sends the answer with channel slack.
The message is updated in place with the outcome whichever channel
answered. Requests already posted (found in the channel's history) are
not posted again after a restart. docs/BRIDGES.md has the config.`,
		Example: `  heed chat chat.yaml
  heed chat chat.yaml --log-level info`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := service.ParseLogLevel(logLevel); err != nil {
				return err
			}
			cfg, err := chat.ReadConfig(args[0])
			if err != nil {
				return &exitError{status: exitUsage, code: events.CodeOf(err), msg: events.Message(err)}
			}
			token, err := chat.Secret(cfg.Slack.TokenEnv, cfg.Slack.TokenFile)
			if err != nil {
				return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: "slack token: " + events.Message(err)}
			}
			signing, err := chat.Secret(cfg.Slack.SigningSecretEnv, cfg.Slack.SigningSecretFile)
			if err != nil {
				return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: "slack signing secret: " + events.Message(err)}
			}
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: fmt.Sprintf("listen %s: %v", cfg.Listen, err)}
			}
			defer ln.Close()
			c, err := g.connect(cmd.Context(), heedclient.NATSOptions{nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)})
			if err != nil {
				return err
			}
			defer c.Close()
			var opts []slack.Option
			if cfg.Slack.APIURL != "" {
				opts = append(opts, slack.OptionAPIURL(cfg.Slack.APIURL))
			}
			log := service.NewLogger(os.Stderr, logLevel)
			b := &chat.Slack{Client: c.Client, API: slack.New(token, opts...), Channel: cfg.Slack.Channel, SigningSecret: signing,
				Users: cfg.Users, Routing: bridge.Routing{Routes: cfg.Routes}, Log: log}
			mux := http.NewServeMux()
			mux.Handle("POST /slack/actions", b)
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "heed chat: posting to Slack channel %s, clicks at http://%s/slack/actions (Ctrl-C to stop)\n", cfg.Slack.Channel, ln.Addr())
			err = b.Run(cmd.Context())
			if errors.Is(err, context.Canceled) || cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	_ = cmd.RegisterFlagCompletionFunc("log-level", completeChoices("debug", "info", "warn", "error"))
	cmd.ValidArgsFunction = completeYAML
	return cmd
}

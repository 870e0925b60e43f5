package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
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
	var logLevel, metricsListen string
	cmd := &cobra.Command{
		Use:   "chat CONFIG",
		Short: "Post pending requests to Slack or Mattermost and take the answers from their buttons",
		Long: `heed chat posts each pending confirmation or escalation its routes take to a
Slack channel (Block Kit: title, message, skill, step, run, risk, tier,
deadline, one button per option) and/or a Mattermost channel (interactive
message attachments), takes the clicks at its HTTP endpoint (POST
/slack/actions, verified with the signing secret, at most 5 minutes old;
POST /mattermost/actions, verified by each button's signed token), maps
the chat user to a heed identity (the config's users) and sends the
answer with channel slack or mattermost.
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
			secret := func(what, env, file string) (string, error) {
				v, err := chat.Secret(env, file)
				if err != nil {
					return "", &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: what + ": " + events.Message(err)}
				}
				return v, nil
			}
			log := g.logger(logLevel)
			routing := bridge.Routing{Routes: cfg.Routes}
			mux := http.NewServeMux()
			// Each chat runs on the one connection, made once the config
			// and its secrets are known to be good.
			var runs []func(context.Context, *heedclient.Client) error
			var where []string
			if sc := cfg.Slack; sc != nil {
				token, err := secret("slack token", sc.TokenEnv, sc.TokenFile)
				if err != nil {
					return err
				}
				signing, err := secret("slack signing secret", sc.SigningSecretEnv, sc.SigningSecretFile)
				if err != nil {
					return err
				}
				var opts []slack.Option
				if sc.APIURL != "" {
					opts = append(opts, slack.OptionAPIURL(sc.APIURL))
				}
				s := &chat.Slack{API: slack.New(token, opts...), Channel: sc.Channel, SigningSecret: signing, Users: cfg.Users, Routing: routing, Log: log}
				mux.Handle("POST /slack/actions", s)
				runs = append(runs, func(ctx context.Context, c *heedclient.Client) error { s.Client = c; return s.Run(ctx) })
				where = append(where, "Slack channel "+sc.Channel+" (clicks: /slack/actions)")
			}
			if mc := cfg.Mattermost; mc != nil {
				token, err := secret("mattermost token", mc.TokenEnv, mc.TokenFile)
				if err != nil {
					return err
				}
				key, err := secret("mattermost button key", mc.ButtonKeyEnv, mc.ButtonKeyFile)
				if err != nil {
					return err
				}
				m := &chat.Mattermost{URL: mc.URL, Token: token, ChannelID: mc.ChannelID, CallbackURL: mc.CallbackURL, Key: []byte(key), Users: cfg.Users, Routing: routing, Log: log}
				mux.Handle("POST /mattermost/actions", m)
				runs = append(runs, func(ctx context.Context, c *heedclient.Client) error { m.Client = c; return m.Run(ctx) })
				where = append(where, "Mattermost channel "+mc.ChannelID+" (clicks: /mattermost/actions)")
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
			if _, err := serveOps(cmd.Context(), cmd.ErrOrStderr(), metricsListen, "chat", c.Conn(), log); err != nil {
				return err
			}
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "heed chat: posting to %s, listening on http://%s (Ctrl-C to stop)\n", strings.Join(where, " and "), ln.Addr())
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			errs := make(chan error, len(runs))
			for _, run := range runs {
				go func() { errs <- run(ctx, c.Client) }()
			}
			err = <-errs
			cancel()
			for range len(runs) - 1 {
				<-errs
			}
			if errors.Is(err, context.Canceled) || cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	addMetricsFlag(cmd, &metricsListen)
	_ = cmd.RegisterFlagCompletionFunc("log-level", completeChoices("debug", "info", "warn", "error"))
	cmd.ValidArgsFunction = completeYAML
	return cmd
}

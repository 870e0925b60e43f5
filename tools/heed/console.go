package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/tools/bridge"
	"github.com/heedhq/heed/tools/console"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// consoleOptions are the console's settings, for heed console and heed up.
type consoleOptions struct {
	listen, users, routes string
	tlsCert, tlsKey       string
	secureCookies         bool
	sessionTTL            time.Duration
}

func (o *consoleOptions) flags(cmd *cobra.Command, prefix string) {
	cmd.Flags().StringVar(&o.users, prefix+"users", "", "users file: who may sign in to the console (YAML; docs/CONSOLE.md)")
	cmd.Flags().StringVar(&o.routes, prefix+"routes", "", "routing file: which requests the console's inbox offers (docs/BRIDGES.md)")
	cmd.Flags().StringVar(&o.tlsCert, prefix+"tls-cert", "", "serve the console over HTTPS with this certificate (PEM)")
	cmd.Flags().StringVar(&o.tlsKey, prefix+"tls-key", "", "the certificate's key (PEM)")
	cmd.Flags().BoolVar(&o.secureCookies, prefix+"secure-cookies", false, "mark cookies Secure on plain HTTP (behind a proxy that terminates TLS)")
	cmd.Flags().DurationVar(&o.sessionTTL, prefix+"session-ttl", 12*time.Hour, "how long a sign-in lasts")
}

// check refuses bad settings before anything starts.
func (o *consoleOptions) check(flagPrefix string) (*console.Users, bridge.Routing, error) {
	var routing bridge.Routing
	if o.users == "" {
		return nil, routing, badInput("--%susers: the console needs a users file (docs/CONSOLE.md)", flagPrefix)
	}
	users, err := console.ReadUsers(o.users)
	if err != nil {
		return nil, routing, &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: err.Error()}
	}
	if o.routes != "" {
		if routing, err = bridge.ReadRouting(o.routes); err != nil {
			return nil, routing, &exitError{status: exitUsage, code: events.CodeOf(err), msg: events.Message(err)}
		}
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, routing, badInput("--%stls-cert and --%stls-key go together", flagPrefix, flagPrefix)
	}
	return users, routing, nil
}

// startConsole listens (a taken port is an error at once) and serves the
// console until ctx ends; it returns where it listens.
func startConsole(ctx context.Context, c *heedclient.Client, o consoleOptions, users *console.Users, routing bridge.Routing, log *slog.Logger) (string, <-chan error, error) {
	srv, err := console.New(ctx, c, console.Config{Users: users, Routing: routing, SecureCookies: o.secureCookies, SessionTTL: o.sessionTTL, Log: log})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return "", nil, &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: fmt.Sprintf("console: listen on %s: %v", o.listen, err)}
	}
	scheme := "http"
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			ln.Close()
			return "", nil, badInput("console TLS: %v", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	return scheme + "://" + ln.Addr().String(), done, nil
}

func newConsoleCmd(g *globals) *cobra.Command {
	var o consoleOptions
	var logLevel, metricsListen string
	cmd := &cobra.Command{
		Use:   "console --listen ADDR --users FILE",
		Short: "Serve the web console: the inbox, change sets, runs, learned state and statistics",
		Long: `heed console serves the web console against a running heed (--nats-url):
people sign in (users file: password or token), answer the confirmations
and escalations offered to them, review change sets item by item, watch
runs live and read their timelines, forget learned state, read the
statistics. Every answer carries the signed-in identity and channel web.
heed up serves the same console with --console-listen. docs/CONSOLE.md.`,
		Example: `  heed console --listen 127.0.0.1:8080 --users console-users.yaml
  heed console --listen :8443 --users console-users.yaml --tls-cert cert.pem --tls-key key.pem
  heed console hash-password`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := service.ParseLogLevel(logLevel); err != nil {
				return err
			}
			users, routing, err := o.check("")
			if err != nil {
				return err
			}
			log := g.logger(logLevel)
			c, err := g.connect(cmd.Context(), heedclient.Name("heed-console"), heedclient.Source("heed/console"), heedclient.NATSOptions{nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)})
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := serveOps(cmd.Context(), cmd.ErrOrStderr(), metricsListen, "console", c.Conn(), log); err != nil {
				return err
			}
			addr, done, err := startConsole(cmd.Context(), c.Client, o, users, routing, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "heed console: on %s (Ctrl-C to stop)\n", addr)
			err = <-done
			if errors.Is(err, cmd.Context().Err()) {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8080", "host:port the console listens on")
	o.flags(cmd, "")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	addMetricsFlag(cmd, &metricsListen)

	hash := &cobra.Command{
		Use:   "hash-password",
		Short: "Read a password (or, with --token, a token) and print what the users file keeps of it",
		Long: `hash-password reads a password from the terminal (not echoed) or standard
input and prints its bcrypt hash, for password_bcrypt in the users file.
With --token it prints the SHA-256 of a token instead, for token_sha256.`,
		Example: `  heed console hash-password
  printf '%s' "$TOKEN" | heed console hash-password --token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, _ := cmd.Flags().GetBool("token")
			secret, err := readSecret(cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if token {
				if len(secret) < 16 {
					return badInput("use a token of at least 16 characters")
				}
				fmt.Fprintln(cmd.OutOrStdout(), console.HashToken(secret))
				return nil
			}
			h, err := console.HashPassword(secret)
			if err != nil {
				return badInput("%v", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), h)
			return nil
		},
	}
	hash.Flags().Bool("token", false, "hash a token (SHA-256) instead of a password (bcrypt)")
	cmd.AddCommand(hash)
	return cmd
}

// readSecret reads one line: from a terminal without echo, else as is.
func readSecret(in io.Reader, prompt io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		return string(b), err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", badInput("nothing to hash: give it on standard input")
	}
	return line, nil
}

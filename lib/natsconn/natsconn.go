// Package natsconn is how every heed program authenticates to NATS and
// secures the connection: a credentials file (JWT + nkey, as `nsc` and
// `heed deploy permissions` write), an nkey seed, a user and password, or
// a token; TLS with a private CA and, for mTLS, a client certificate. The
// same flags and environment variables work for the CLI, every service's
// main, the bridges, the console and the MCP server (docs/PRODUCTION.md).
package natsconn

import (
	"fmt"
	"os"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
)

// Auth says how to authenticate and secure a NATS connection. The zero
// value adds nothing (the URL's own user:password@ or token@ still work).
type Auth struct {
	// Creds is a credentials file (a user JWT and its nkey seed).
	Creds string
	// NKey is a file holding an nkey seed (users authenticated by nkey).
	NKey string
	// User and Password authenticate by name; Password comes from the
	// environment or PasswordFile, never a flag (it would show in ps).
	User         string
	Password     string
	PasswordFile string
	// Token is a bearer token (from the environment only, as Password).
	Token string
	// CA is a PEM file of the CAs that sign the servers' certificates
	// (TLS to the server); Cert and Key are the client's certificate and
	// key for mTLS.
	CA   string
	Cert string
	Key  string
}

// The environment variables Auth reads (FromEnv), one per field.
const (
	EnvCreds        = "HEED_NATS_CREDS"
	EnvNKey         = "HEED_NATS_NKEY"
	EnvUser         = "HEED_NATS_USER"
	EnvPassword     = "HEED_NATS_PASSWORD"
	EnvPasswordFile = "HEED_NATS_PASSWORD_FILE"
	EnvToken        = "HEED_NATS_TOKEN"
	EnvCA           = "HEED_NATS_CA"
	EnvCert         = "HEED_NATS_CERT"
	EnvKey          = "HEED_NATS_KEY"
)

// FromEnv returns the Auth the environment names ($HEED_NATS_CREDS and
// the rest of the Env constants).
func FromEnv() Auth {
	return Auth{
		Creds: os.Getenv(EnvCreds), NKey: os.Getenv(EnvNKey),
		User: os.Getenv(EnvUser), Password: os.Getenv(EnvPassword), PasswordFile: os.Getenv(EnvPasswordFile),
		Token: os.Getenv(EnvToken),
		CA:    os.Getenv(EnvCA), Cert: os.Getenv(EnvCert), Key: os.Getenv(EnvKey),
	}
}

// AddFlags adds --nats-creds, --nats-nkey, --nats-user,
// --nats-password-file, --nats-ca, --nats-cert and --nats-key to fs, each
// defaulting to its environment variable, and returns the Auth they fill.
func AddFlags(fs *pflag.FlagSet) *Auth {
	a := FromEnv()
	fs.StringVar(&a.Creds, "nats-creds", a.Creds, "NATS credentials file (user JWT and nkey seed; env "+EnvCreds+")")
	fs.StringVar(&a.NKey, "nats-nkey", a.NKey, "file with the NATS user's nkey seed (env "+EnvNKey+")")
	fs.StringVar(&a.User, "nats-user", a.User, "NATS user name; the password from $"+EnvPassword+" or --nats-password-file (env "+EnvUser+")")
	fs.StringVar(&a.PasswordFile, "nats-password-file", a.PasswordFile, "file holding the NATS user's password (env "+EnvPasswordFile+")")
	fs.StringVar(&a.CA, "nats-ca", a.CA, "PEM file of the CA(s) that sign the NATS servers' certificates (env "+EnvCA+")")
	fs.StringVar(&a.Cert, "nats-cert", a.Cert, "client certificate for mutual TLS, PEM (env "+EnvCert+")")
	fs.StringVar(&a.Key, "nats-key", a.Key, "client certificate's private key, PEM (env "+EnvKey+")")
	return &a
}

// Validate says what is wrong with a, with code invalid_request: files
// that cannot be read, a certificate without its key, two ways of
// authenticating at once.
func (a Auth) Validate() error {
	ways := []string{}
	if a.Creds != "" {
		ways = append(ways, "--nats-creds")
	}
	if a.NKey != "" {
		ways = append(ways, "--nats-nkey")
	}
	if a.User != "" {
		ways = append(ways, "--nats-user")
	}
	if a.Token != "" {
		ways = append(ways, "$"+EnvToken)
	}
	if len(ways) > 1 {
		return events.Errorf(events.CodeInvalidRequest, "NATS authentication: use one of %s, not several", strings.Join(ways, ", "))
	}
	if (a.Cert == "") != (a.Key == "") {
		return events.Errorf(events.CodeInvalidRequest, "mutual TLS needs both --nats-cert and --nats-key")
	}
	if a.User == "" && (a.Password != "" || a.PasswordFile != "") {
		return events.Errorf(events.CodeInvalidRequest, "a NATS password needs --nats-user")
	}
	for flag, path := range map[string]string{"--nats-creds": a.Creds, "--nats-nkey": a.NKey, "--nats-password-file": a.PasswordFile, "--nats-ca": a.CA, "--nats-cert": a.Cert, "--nats-key": a.Key} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return events.Errorf(events.CodeInvalidRequest, "%s %s: %v", flag, path, errorText(err))
		}
	}
	return nil
}

func errorText(err error) string {
	if os.IsNotExist(err) {
		return "no such file"
	}
	return err.Error()
}

// Options returns the nats.Options that apply a (after Validate).
func (a Auth) Options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKey != "":
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "--nats-nkey %s: %v", a.NKey, err)
		}
		opts = append(opts, o)
	case a.User != "":
		pw := a.Password
		if a.PasswordFile != "" {
			b, err := os.ReadFile(a.PasswordFile)
			if err != nil {
				return nil, events.Errorf(events.CodeInvalidRequest, "--nats-password-file: %v", err)
			}
			pw = strings.TrimRight(string(b), "\r\n")
		}
		opts = append(opts, nats.UserInfo(a.User, pw))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	}
	if a.CA != "" {
		opts = append(opts, nats.RootCAs(a.CA))
	}
	if a.Cert != "" {
		opts = append(opts, nats.ClientCert(a.Cert, a.Key))
	}
	return opts, nil
}

// Describe says in a few words how a authenticates, for logs (never a
// secret): "creds file /etc/heed/runner.creds, TLS".
func (a Auth) Describe() string {
	var parts []string
	switch {
	case a.Creds != "":
		parts = append(parts, "creds file "+a.Creds)
	case a.NKey != "":
		parts = append(parts, "nkey "+a.NKey)
	case a.User != "":
		parts = append(parts, "user "+a.User)
	case a.Token != "":
		parts = append(parts, "token")
	}
	if a.Cert != "" {
		parts = append(parts, "mTLS")
	} else if a.CA != "" {
		parts = append(parts, "TLS")
	}
	if len(parts) == 0 {
		return "no credentials"
	}
	return fmt.Sprint(strings.Join(parts, ", "))
}

package chat

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/tools/bridge"
	"gopkg.in/yaml.v3"
)

// Config is the chat bridge's file (docs/BRIDGES.md, Chat). Secrets are
// named by environment variable or file, never written in it.
type Config struct {
	// Listen is where the chat sends button clicks (Slack: POST
	// /slack/actions).
	Listen     string            `yaml:"listen"`
	Slack      *SlackConfig      `yaml:"slack,omitempty"`
	Mattermost *MattermostConfig `yaml:"mattermost,omitempty"`
	// Users maps chat user ids to heed identities.
	Users  Users          `yaml:"users"`
	Routes []bridge.Route `yaml:"routes,omitempty"`
}

// SlackConfig names the Slack channel and where its secrets are.
type SlackConfig struct {
	Channel           string `yaml:"channel"`
	TokenEnv          string `yaml:"token_env,omitempty"`
	TokenFile         string `yaml:"token_file,omitempty"`
	SigningSecretEnv  string `yaml:"signing_secret_env,omitempty"`
	SigningSecretFile string `yaml:"signing_secret_file,omitempty"`
	// APIURL is Slack's Web API (default https://slack.com/api/).
	APIURL string `yaml:"api_url,omitempty"`
}

// MattermostConfig names the Mattermost server, channel and secrets.
type MattermostConfig struct {
	URL       string `yaml:"url"`
	ChannelID string `yaml:"channel_id"`
	TokenEnv  string `yaml:"token_env,omitempty"`
	TokenFile string `yaml:"token_file,omitempty"`
	// The key that signs each button's context.
	ButtonKeyEnv  string `yaml:"button_key_env,omitempty"`
	ButtonKeyFile string `yaml:"button_key_file,omitempty"`
	// CallbackURL is this bridge's /mattermost/actions as the Mattermost
	// server reaches it.
	CallbackURL string `yaml:"callback_url"`
}

// ReadConfig reads and checks a chat bridge file; unknown keys are an
// error.
func ReadConfig(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "chat config: %v", err)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, events.Errorf(events.CodeInvalidRequest, "chat config %s: %s", file, bridge.OneLine(err))
	}
	bad := func(format string, args ...any) error {
		return events.Errorf(events.CodeInvalidRequest, "chat config %s: "+format, append([]any{file}, args...)...)
	}
	if c.Listen == "" {
		return nil, bad("listen: the address the chat sends clicks to is missing (e.g. 127.0.0.1:8089)")
	}
	if c.Slack == nil && c.Mattermost == nil {
		return nil, bad("no chat configured: add slack, mattermost or both")
	}
	if s := c.Slack; s != nil {
		if s.Channel == "" {
			return nil, bad("slack.channel is missing")
		}
		if (s.TokenEnv == "") == (s.TokenFile == "") {
			return nil, bad("slack: give one of token_env and token_file")
		}
		if (s.SigningSecretEnv == "") == (s.SigningSecretFile == "") {
			return nil, bad("slack: give one of signing_secret_env and signing_secret_file")
		}
	}
	if m := c.Mattermost; m != nil {
		if m.URL == "" || m.ChannelID == "" || m.CallbackURL == "" {
			return nil, bad("mattermost: url, channel_id and callback_url are all needed")
		}
		if (m.TokenEnv == "") == (m.TokenFile == "") {
			return nil, bad("mattermost: give one of token_env and token_file")
		}
		if (m.ButtonKeyEnv == "") == (m.ButtonKeyFile == "") {
			return nil, bad("mattermost: give one of button_key_env and button_key_file")
		}
	}
	if len(c.Users) == 0 {
		return nil, bad("users is empty: nobody's click could be taken")
	}
	return &c, nil
}

// Secret reads a secret from an environment variable or a file (trimmed);
// the error names where it looked, never the value.
func Secret(env, file string) (string, error) {
	if env != "" {
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", events.Errorf(events.CodeInvalidRequest, "$%s is empty or unset", env)
		}
		return v, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", events.Errorf(events.CodeInvalidRequest, "secret file: %v", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", events.Errorf(events.CodeInvalidRequest, "secret file %s is empty", file)
	}
	return v, nil
}

package service

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/spf13/pflag"
)

// A service main takes GNU-style flags, refuses bad values with code
// invalid_request and one clear message, and lists its flags on --help.
func TestParseFlags(t *testing.T) {
	var tools string
	register := func(fs *pflag.FlagSet) RunFunc {
		fs.StringVar(&tools, "tools", "", "tools file")
		return nil
	}
	t.Run("ok", func(t *testing.T) {
		f, _, err := ParseFlags("runner", []string{"--log-level", "debug", "--tools=x.yaml", "--health-stall", "5s", "--replicas", "3"}, register, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if f.LogLevel != slog.LevelDebug || tools != "x.yaml" || f.StallAfter != 5*time.Second || f.Replicas != 3 {
			t.Errorf("parsed %+v, tools %q", f, tools)
		}
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "loud"}, `--log-level "loud": use debug, info, warn or error`},
		{[]string{"--log-level", "wrn"}, `(did you mean "warn"?)`},
		{[]string{"-log-level", "debug"}, "flags take two dashes: --log-level"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"--replicas", "0"}, "--replicas 0: JetStream takes 1 to 5"},
		{[]string{"--health-stall", "soon"}, `invalid argument "soon"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, _, err := ParseFlags("runner", c.args, register, &bytes.Buffer{})
			if events.CodeOf(err) != events.CodeInvalidRequest || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want invalid_request containing %q", err, c.want)
			}
			if strings.Count(err.Error(), "invalid_request") != 1 || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q: want one line that says its code once", err)
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		var out bytes.Buffer
		_, _, err := ParseFlags("runner", []string{"--help"}, register, &out)
		if !errors.Is(err, pflag.ErrHelp) {
			t.Fatalf("err = %v, want pflag.ErrHelp", err)
		}
		for _, f := range []string{"--log-level", "--nats-url", "--tools", "Usage:"} {
			if !strings.Contains(out.String(), f) {
				t.Errorf("--help does not list %s:\n%s", f, out.String())
			}
		}
		if strings.Count(out.String(), "Usage:") != 1 {
			t.Errorf("--help prints its usage %d times", strings.Count(out.String(), "Usage:"))
		}
	})
}

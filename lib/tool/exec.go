package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// renderArgv renders the argv templates for a call: each to exactly one
// word, and every expression must give a value (an argument the call
// left out is an error, not an empty word).
func (s *Spec) renderArgv(c Call) ([]string, error) {
	env := map[string]any{
		"args": c.Args,
		"run":  map[string]any{"id": c.RunID, "step": c.Step, "attempt": c.Attempt, "idempotency_key": c.IdempotencyKey},
	}
	argv := make([]string, 0, len(s.argv))
	for i, t := range s.argv {
		v, err := t.RenderArg(env)
		if err != nil {
			return nil, fmt.Errorf("tool %s args[%d]: %w", s.Name, i, err)
		}
		argv = append(argv, v)
	}
	return argv, nil
}

// CheckArgs says whether a call with args can be made: for an exec tool,
// every argv template renders (a change item is refused when proposed,
// not when applied after someone confirmed it). A NATS tool takes any
// args (its service judges them).
func (s *Spec) CheckArgs(args map[string]any) error {
	if s.Kind != KindExec {
		return nil
	}
	_, err := s.renderArgv(Call{Args: args, RunID: "check", Step: "check", Attempt: 1, IdempotencyKey: "check"})
	return err
}

// runExec runs an exec tool without a shell: every argv template renders to
// exactly one argv element, so no value can add words or run code.
func runExec(ctx context.Context, s *Spec, c Call) Result {
	argv, err := s.renderArgv(c)
	if err != nil {
		return Result{Err: &Error{Kind: "template", Message: err.Error()}}
	}
	cmd := exec.Command(s.program, argv...)
	// Its own process group (a timeout kills the whole group), and killed
	// with heed: when the process that started it dies (kill -9, a crash),
	// the kernel sends it SIGKILL, so a tool never outlives its runner and
	// never runs twice at once with its retry.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = execEnv(s, c)
	stdin, _ := json.Marshal(c.Args)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &capped{max: s.MaxOutput}
	stderr := &capped{max: 64 * 1024}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked exits, not the
		// process: keep this goroutine on its thread until the tool ends.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		kind := "exec"
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			kind = "not_found"
		}
		return Result{Err: &Error{Kind: kind, Message: fmt.Sprintf("tool %s: cannot start %s: %v", s.Name, s.program, err)}}
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		kind, what := "timeout", fmt.Sprintf("timed out after %s", s.timeout)
		if errors.Is(ctx.Err(), context.Canceled) {
			kind, what = "cancelled", "cancelled"
		}
		return Result{Output: parseOutput(stdout.Bytes()), Err: &Error{Kind: kind, Message: fmt.Sprintf("tool %s %s", s.Name, what)}}
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code := ee.ExitCode()
			msg := strings.TrimSpace(stderr.String())
			if msg == "" {
				msg = strings.TrimSpace(stdout.String())
			}
			if msg == "" {
				msg = fmt.Sprintf("tool %s exited with status %d", s.Name, code)
			}
			return Result{Output: parseOutput(stdout.Bytes()), Err: &Error{Kind: "exit", Message: msg, ExitCode: &code}}
		}
		return Result{Err: &Error{Kind: "exec", Message: fmt.Sprintf("tool %s: %v", s.Name, err)}}
	}
	return Result{Output: parseOutput(stdout.Bytes())}
}

// execEnv is the allowlisted environment plus what heed tells every tool.
func execEnv(s *Spec, c Call) []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, name := range s.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range s.SetEnv {
		env = append(env, k+"="+v)
	}
	args, _ := json.Marshal(c.Args)
	return append(env,
		"HEED_TOOL="+s.Name,
		"HEED_RUN_ID="+c.RunID,
		"HEED_STEP="+c.Step,
		"HEED_ATTEMPT="+strconv.Itoa(c.Attempt),
		"HEED_IDEMPOTENCY_KEY="+c.IdempotencyKey,
		"HEED_ARGS="+string(args),
	)
}

// capped is a buffer that keeps the first max bytes.
type capped struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
			c.truncated = true
		} else {
			c.buf.Write(p)
		}
	} else if len(p) > 0 {
		c.truncated = true
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte  { return c.buf.Bytes() }
func (c *capped) String() string { return c.buf.String() }

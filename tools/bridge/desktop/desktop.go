// Package desktop is heed's desktop bridge: each request a person may
// answer becomes a notification with one action per option (libnotify's
// notify-send, through the session's notification daemon) or, when the
// daemon has no actions or a dialog is asked for, a Zenity list dialog,
// else a kdialog one (the seed's order). The answer goes back as
// heed.cmd.confirm.answer with the person's identity and channel desktop.
package desktop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/tools/bridge"
)

// Channel is the channel name answers from this bridge carry.
const Channel = "desktop"

// Config configures the bridge.
type Config struct {
	Identity string
	Routing  bridge.Routing
	// Dialog asks with a dialog always, never a notification.
	Dialog bool
	// Sound plays a sound with each new request (best effort).
	Sound bool
	Log   *slog.Logger
	// CountdownEvery is how often a notification's countdown is redrawn
	// (default 30 s; at most 10 s in its last minute).
	CountdownEvery time.Duration
	// Getenv and LookPath default to the process's; tests set them.
	Getenv   func(string) string
	LookPath func(string) (string, error)
}

// Backends are what the bridge found on this desktop.
type Backends struct {
	Notify string // notify-send, when the daemon can show actions
	Dialog string // zenity or kdialog
	Why    string // why notifications are not used, if they are not
}

// ErrNoDisplay: no graphical session to show anything in.
var ErrNoDisplay = errors.New("no display")

// Detect finds how to ask on this desktop, or says why it cannot: no
// display, or neither a notification daemon with actions nor a dialog
// program.
func Detect(ctx context.Context, cfg Config) (Backends, error) {
	getenv, look := cfg.Getenv, cfg.LookPath
	if getenv == nil {
		getenv = os.Getenv
	}
	if look == nil {
		look = exec.LookPath
	}
	if getenv("DISPLAY") == "" && getenv("WAYLAND_DISPLAY") == "" {
		return Backends{}, fmt.Errorf("%w: DISPLAY and WAYLAND_DISPLAY are unset (run heed desktop inside your desktop session)", ErrNoDisplay)
	}
	var b Backends
	for _, d := range []string{"zenity", "kdialog"} {
		if p, err := look(d); err == nil {
			b.Dialog = p
			break
		}
	}
	switch p, err := look("notify-send"); {
	case cfg.Dialog:
		b.Why = "--dialog"
	case err != nil:
		b.Why = "notify-send is not installed (Debian: libnotify-bin)"
	default:
		if why := notifyCapable(ctx, look); why != "" {
			b.Why = why
		} else {
			b.Notify = p
		}
	}
	if b.Notify == "" && b.Dialog == "" {
		return b, fmt.Errorf("nothing to ask with: %s, and neither zenity nor kdialog is installed", b.Why)
	}
	return b, nil
}

// notifyCapable asks the session's notification daemon whether it shows
// actions; "" when it does (or when it cannot be asked: gdbus missing).
func notifyCapable(ctx context.Context, look func(string) (string, error)) string {
	gdbus, err := look("gdbus")
	if err != nil {
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, gdbus, "call", "--session", "--dest", "org.freedesktop.Notifications",
		"--object-path", "/org/freedesktop/Notifications", "--method", "org.freedesktop.Notifications.GetCapabilities").CombinedOutput()
	if err != nil {
		return "no notification daemon answers on the session bus: " + strings.TrimSpace(firstLine(string(out)))
	}
	if !strings.Contains(string(out), "'actions'") {
		return "the notification daemon shows no action buttons"
	}
	return ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Run shows each request identity may answer until ctx ends.
func Run(ctx context.Context, c *heedclient.Client, cfg Config, b Backends) error {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Identity == "" {
		return events.Errorf(events.CodeInvalidRequest, "heed desktop needs an identity (--as NAME or HEED_IDENTITY)")
	}
	leave, err := c.Present(ctx, cfg.Identity, Channel)
	if err != nil {
		return err
	}
	defer leave()
	routing := cfg.Routing
	routing.Channel = Channel
	updates, err := bridge.Watch(ctx, c, cfg.Identity, routing)
	if err != nil {
		return err
	}
	d := &desk{c: c, cfg: cfg, b: b, log: log, shown: map[string]*shown{}}
	for u := range updates {
		if u.Closed {
			d.closed(ctx, u)
			continue
		}
		d.show(ctx, u.Offer)
	}
	d.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return events.Errorf(events.CodeUnavailable, "lost the watch of pending requests")
}

type desk struct {
	c   *heedclient.Client
	cfg Config
	b   Backends
	log *slog.Logger
	wg  sync.WaitGroup

	mu    sync.Mutex
	shown map[string]*shown
}

// shown is one request on screen.
type shown struct {
	offer  bridge.Offer
	cancel context.CancelFunc
	mu     sync.Mutex
	notif  string // the notification's id, once known
	// known is closed once notif is set: an answer from elsewhere can come
	// before notify-send has printed the id, and replacing the
	// notification with the outcome needs it.
	known     chan struct{}
	knownOnce sync.Once
}

// setID records the notification's id.
func (s *shown) setID(id string) {
	s.mu.Lock()
	s.notif = id
	s.mu.Unlock()
	s.knownOnce.Do(func() { close(s.known) })
}

// idWait bounds how long the outcome waits for a notification's id that
// notify-send has not printed yet.
const idWait = 2 * time.Second

func (d *desk) show(ctx context.Context, o bridge.Offer) {
	sctx, cancel := context.WithCancel(ctx)
	if !o.Deadline.IsZero() {
		sctx, cancel = context.WithDeadline(ctx, o.Deadline)
	}
	s := &shown{offer: o, cancel: cancel, known: make(chan struct{})}
	d.mu.Lock()
	d.shown[o.ID] = s
	d.mu.Unlock()
	if d.cfg.Sound {
		go playSound(ctx)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer cancel()
		choice, err := d.ask(sctx, s)
		d.mu.Lock()
		delete(d.shown, o.ID)
		d.mu.Unlock()
		if err != nil || choice == "" {
			if err != nil && sctx.Err() == nil {
				d.log.Warn("desktop: asking failed", "confirmation", o.ID, "err", err)
			}
			return
		}
		_, err = bridge.Answer(ctx, d.c, o.ID, choice, d.cfg.Identity, Channel, "")
		if a, ok := bridge.IsAnswered(err); ok {
			d.notice(ctx, o.Title, a.Msg)
			return
		}
		if err != nil {
			d.log.Warn("desktop: answer refused", "confirmation", o.ID, "err", err)
			d.notice(ctx, o.Title, "not answered: "+events.Message(err))
			return
		}
		d.log.Info("desktop: answered", "confirmation", o.ID, "choice", choice, "by", d.cfg.Identity)
	}()
}

// closed: the request was answered elsewhere (or expired): the
// notification is replaced by the outcome, a dialog is closed.
func (d *desk) closed(ctx context.Context, u bridge.Update) {
	d.mu.Lock()
	s := d.shown[u.Offer.ID]
	delete(d.shown, u.Offer.ID)
	d.mu.Unlock()
	if s == nil {
		return
	}
	s.cancel()
	if d.b.Notify != "" && !s.offer.Dialog && u.Winner != nil {
		// Shown, but its id maybe not read yet (notify below learns it
		// until idWait after the cancel).
		select {
		case <-s.known:
		case <-time.After(idWait + time.Second):
		}
	}
	s.mu.Lock()
	id := s.notif
	s.mu.Unlock()
	if id != "" && d.b.Notify != "" && u.Winner != nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = exec.CommandContext(cctx, d.b.Notify, "--app-name=heed", "--replace-id="+id, "--expire-time=8000", s.offer.Title, u.Winner.Describe(s.offer)).Run()
	}
}

// notice shows a short notification (or nothing, without notify-send).
func (d *desk) notice(ctx context.Context, title, body string) {
	if d.b.Notify == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = exec.CommandContext(cctx, d.b.Notify, "--app-name=heed", "--expire-time=8000", title, body).Run()
}

func (d *desk) ask(ctx context.Context, s *shown) (string, error) {
	if d.b.Notify != "" && !s.offer.Dialog {
		return d.notify(ctx, s)
	}
	if d.b.Dialog == "" {
		return "", fmt.Errorf("the request asks for a dialog and neither zenity nor kdialog is installed")
	}
	if strings.HasSuffix(d.b.Dialog, "kdialog") {
		return kdialog(ctx, d.b.Dialog, s.offer)
	}
	return zenity(ctx, d.b.Dialog, s.offer)
}

// Body is the text of a notification or dialog: the message, then what
// the person weighs (risk, tier, operation, skill and step) and the
// deadline with the default.
func Body(o bridge.Offer, now time.Time) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(o.Message))
	var facts []string
	if o.Risk != nil {
		facts = append(facts, fmt.Sprintf("risk %.0f%%", *o.Risk*100))
	}
	if o.Tier != "" {
		facts = append(facts, "tier "+o.Tier)
	}
	if o.Operation != "" {
		op := o.Operation
		if o.Scope != "" {
			op += " on " + o.Scope
		}
		if o.Environment != "" {
			op += " (" + o.Environment + ")"
		}
		facts = append(facts, op)
	}
	if o.Skill != "" {
		facts = append(facts, strings.Trim(o.Skill+" / "+o.Step, " /"))
	}
	if len(facts) > 0 {
		b.WriteString("\n" + strings.Join(facts, " · "))
	}
	if !o.Deadline.IsZero() {
		left := o.Deadline.Sub(now).Round(time.Second)
		b.WriteString(fmt.Sprintf("\nAnswer by %s (in %s)", o.Deadline.Local().Format("15:04:05"), left))
		if o.Default != "" {
			b.WriteString(", else " + labelOf(o, o.Default))
		}
	}
	return b.String()
}

func labelOf(o bridge.Offer, value string) string {
	for _, opt := range o.Options {
		if opt.Value == value && opt.Label != "" {
			return opt.Label
		}
	}
	return value
}

// notifyArgs are notify-send's arguments for the offer as of now (its
// countdown), replacing notification id when it is not "".
func notifyArgs(o bridge.Offer, id string) []string {
	args := []string{"--app-name=heed", "--print-id", "--wait", "--urgency=critical"}
	if id != "" {
		args = append(args, "--replace-id="+id)
	}
	if !o.Deadline.IsZero() {
		args = append(args, "--expire-time="+strconv.FormatInt(max(time.Until(o.Deadline).Milliseconds(), 1000), 10))
	} else {
		args = append(args, "--expire-time=0")
	}
	for _, opt := range o.Options {
		args = append(args, "--action="+opt.Value+"="+opt.Label)
	}
	return append(args, o.Title, Body(o, time.Now()))
}

// shownBy is one notify-send showing (or redrawing) a notification and
// waiting for its click.
type shownBy struct {
	gen int
	cmd *exec.Cmd
	id  chan string // the notification's id, once printed
}

// notify shows a notification with one action per option and waits for
// one: notify-send --wait prints the chosen action's name. The countdown
// is redrawn every CountdownEvery (10 s in the last minute) by a new
// notify-send replacing the notification, which then is the one waiting
// for the click (the daemon tells the one it replaced that its
// notification closed).
func (d *desk) notify(ctx context.Context, s *shown) (string, error) {
	o := s.offer
	choices := make(chan string, 8)
	exited := make(chan int, 8)
	gen := 0
	start := func(replace string) (*shownBy, error) {
		gen++
		// notify-send prints the id at once but, writing to a pipe, its
		// stdio holds it until it exits: line-buffered (stdbuf, from
		// coreutils) the id arrives while it waits.
		bin, args := d.b.Notify, notifyArgs(o, replace)
		if sb, err := exec.LookPath("stdbuf"); err == nil {
			bin, args = sb, append([]string{"-oL", d.b.Notify}, args...)
		}
		sb := &shownBy{gen: gen, cmd: exec.CommandContext(ctx, bin, args...), id: make(chan string, 1)}
		out, err := sb.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := sb.cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			sc := bufio.NewScanner(out)
			first := true
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				switch {
				case line == "":
				case first:
					first = false
					sb.id <- line
				default:
					choices <- line
				}
			}
			_ = sb.cmd.Wait()
			exited <- sb.gen
		}()
		return sb, nil
	}
	cur, err := start("")
	if err != nil {
		return "", err
	}
	var procs []*shownBy
	procs = append(procs, cur)
	defer func() {
		for _, p := range procs {
			if p.cmd.Process != nil {
				_ = p.cmd.Process.Kill()
			}
		}
	}()
	every := d.cfg.CountdownEvery
	if every <= 0 {
		every = 30 * time.Second
	}
	redraw := time.NewTimer(every)
	defer redraw.Stop()
	if o.Deadline.IsZero() {
		redraw.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			// Answered elsewhere, or the deadline passed: the outcome
			// replaces the notification (closed), which needs its id;
			// notify-send may not have printed it yet.
			select {
			case <-s.known:
			case id := <-cur.id:
				s.setID(id)
			case <-time.After(idWait):
			}
			return "", nil
		case id := <-cur.id:
			s.setID(id)
		case c := <-choices:
			return valid(o, c)
		case g := <-exited:
			if g == cur.gen {
				return "", nil // dismissed or expired without a choice
			}
		case <-redraw.C:
			s.mu.Lock()
			id := s.notif
			s.mu.Unlock()
			if id != "" {
				next, err := start(id)
				if err == nil {
					procs = append(procs, next)
					cur = next
				}
			}
			wait := every
			if time.Until(o.Deadline) <= time.Minute {
				wait = min(every, 10*time.Second)
			}
			redraw.Reset(wait)
		}
	}
}

func valid(o bridge.Offer, choice string) (string, error) {
	for _, opt := range o.Options {
		if opt.Value == choice {
			return choice, nil
		}
	}
	return "", fmt.Errorf("the desktop returned %q, not one of the options", choice)
}

// zenity asks with a list dialog, its timeout the deadline.
func zenity(ctx context.Context, bin string, o bridge.Offer) (string, error) {
	args := []string{"--list", "--title=" + o.Title, "--text=" + Body(o, time.Now()), "--column=Choice", "--column=value",
		"--hide-column=2", "--print-column=2", "--width=480", "--height=320"}
	if !o.Deadline.IsZero() {
		args = append(args, "--timeout="+strconv.Itoa(max(int(time.Until(o.Deadline).Seconds()), 1)))
	}
	for _, opt := range o.Options {
		args = append(args, opt.Label, opt.Value)
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if ctx.Err() != nil {
		return "", nil
	}
	choice := strings.TrimSpace(string(out))
	if choice == "" {
		return "", nil // cancelled or timed out: the deadline's default applies
	}
	if i := strings.IndexByte(choice, '|'); i >= 0 {
		choice = choice[:i] // a double-click may print the row twice
	}
	if c, verr := valid(o, choice); verr == nil {
		return c, nil
	}
	return "", err
}

// kdialog asks with a radio list; it has no timeout of its own, the
// deadline kills it.
func kdialog(ctx context.Context, bin string, o bridge.Offer) (string, error) {
	args := []string{"--title", o.Title, "--radiolist", Body(o, time.Now())}
	for _, opt := range o.Options {
		on := "off"
		if opt.Value == o.Default {
			on = "on"
		}
		args = append(args, opt.Value, opt.Label, on)
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if ctx.Err() != nil || strings.TrimSpace(string(out)) == "" {
		return "", nil
	}
	c, verr := valid(o, strings.TrimSpace(string(out)))
	if verr != nil {
		return "", errors.Join(verr, err)
	}
	return c, nil
}

// playSound plays the desktop's question sound if a player is there.
func playSound(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if p, err := exec.LookPath("canberra-gtk-play"); err == nil {
		_ = exec.CommandContext(cctx, p, "--id=dialog-question").Run()
		return
	}
	for _, f := range []string{"/usr/share/sounds/freedesktop/stereo/dialog-warning.oga", "/usr/share/sounds/freedesktop/stereo/bell.oga"} {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if p, err := exec.LookPath("paplay"); err == nil {
			_ = exec.CommandContext(cctx, p, f).Run()
		}
		return
	}
}

package events

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler processes one valid event and returns the events it causes. The
// consumer publishes them (ids should be deterministic, derived from the
// input, so a redelivery republishes the same ids and JetStream drops the
// copies) and only then acknowledges the input. Handlers must therefore be
// idempotent. Returning an error retries the event with backoff; an error
// wrapped with Poison, or one that persists for MaxDeliver attempts, sends
// the event to the dead-letter stream.
type Handler func(ctx context.Context, d *Delivery) ([]Event, error)

// Delivery is one valid event as a consumer received it.
type Delivery struct {
	Event     *Event
	Subject   string
	Seq       uint64    // stream sequence: the event's position in the log
	Delivered uint64    // delivery count, 1 on the first delivery
	Stored    time.Time // when the stream stored it

	// afterPrevious: the consumer delivered nothing to any other process
	// between this process's previous delivery and this one (its consumer
	// sequence follows on). With one event in flight, it means no other
	// process handled an event of this consumer in between.
	afterPrevious bool
	// behind is how many messages the consumer had left to deliver
	// after this one when it was delivered.
	behind uint64

	c       *Consumer
	mu      sync.Mutex
	msg     jetstream.Msg // the latest delivery of the message (see adopt)
	latest  uint64        // its delivery count
	adopted uint64        // how many redeliveries it adopted
	held    bool
	closed  bool
	mute    bool // tests: send no progress reports while held
}

// current is the message of the latest delivery: what acknowledging,
// retrying or reporting progress answers.
func (d *Delivery) current() jetstream.Msg {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.msg
}

// adopt makes a redelivery of a held message this delivery's: the server
// sent it again because it stopped hearing about the held one (a consumer
// leader that moved to another node during a failover drops the progress
// reports sent meanwhile). The work is going on here, so the redelivery
// is not handled again, only followed: its reply subject is the one the
// outcome answers. Handling it again would acknowledge it at once (the
// work is not done twice: the handler sees it running) and take away the
// redelivery the held work counts on if it then fails.
func (d *Delivery) adopt(msg jetstream.Msg, delivered uint64) {
	d.mu.Lock()
	d.msg, d.latest = msg, max(d.latest, delivered)
	d.adopted++
	d.mu.Unlock()
}

// Hold detaches the delivery from the handler's return: the input stays
// unacknowledged (and is redelivered after a crash) until the returned
// function is called with the outcome. Use it for work that outlives the
// handler, such as running a tool or waiting out a timer. While it is held
// the consumer tells the server it is in progress (every third of the ack
// wait), so a live process keeps it and only a dead one loses it. Only the
// first call of the returned function counts.
func (d *Delivery) Hold() func(out []Event, err error) {
	d.mu.Lock()
	d.held = true
	d.mu.Unlock()
	d.c.held.Add(1)
	d.c.imu.Lock()
	d.c.holding[d.Seq] = d
	d.c.imu.Unlock()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(max(d.c.cfg.AckWait/3, 50*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-d.c.ctx.Done():
				return // stopping (or a simulated crash): the server may redeliver
			case <-t.C:
				d.mu.Lock()
				msg, mute := d.msg, d.mute
				d.mu.Unlock()
				if !mute {
					_ = msg.InProgress()
				}
			}
		}
	}()
	var once sync.Once
	return func(out []Event, err error) {
		once.Do(func() {
			close(stop)
			defer d.c.held.Done()
			d.c.finish(d.c.ctx, d, out, err)
		})
	}
}

// Header is the stored message's NATS header (ce-* attributes, and the
// Nats-* headers its writer sent, such as an expected last sequence).
func (d *Delivery) Header() nats.Header {
	msg := d.current()
	if msg == nil {
		return nil // a delivery built by hand (tests)
	}
	return msg.Headers()
}

// InProgress tells the server the event is still being worked on, resetting
// its ack timer.
func (d *Delivery) InProgress() error { return d.current().InProgress() }

// ConsumerConfig configures a durable consumer.
type ConsumerConfig struct {
	Stream      string // default EventStream
	Name        string // durable name; also names the consumer in dead letters
	Description string
	Filters     []string // subjects; default every event subject
	// ServerFilter, when set, is the one subject the server filters by; it
	// must cover Filters, and what it delivers beyond them is acknowledged
	// here unhandled. Set it where the filters are several and make up
	// most of what it matches: nats-server 2.15 serves several filters by
	// walking every subject of a message block for each message once the
	// consumer is behind (firstMatchingMulti), so such a consumer slows
	// down the further it falls behind; one filter is a linear scan. The
	// default filters get "heed.>" (the event kinds, and the deadline
	// schedules, which are skipped). The price: a consumer whose server
	// filter covers the schedules takes part in every schedule purge
	// (each answer purges its deadline), in which nats-server walks the
	// consumer's unacknowledged messages.
	ServerFilter string
	DeliverNew   bool // start with new events instead of the whole log

	AckWait       time.Duration   // default 30s
	MaxAckPending int             // default 1000; 1 gives strict log order
	MaxDeliver    int             // attempts before dead-lettering; default 5
	Backoff       []time.Duration // delay before attempt n+1; last repeats
	Workers       int             // handler goroutines; events of one partition stay in order
	// PartitionKey picks the worker; default is the aggregate id, so one
	// aggregate's events are handled in log order.
	PartitionKey func(*Event) string
	// Middleware wraps the handler, the first outermost, inside Recover
	// (which every consumer has).
	Middleware []Middleware
	// Gate is checked before each delivery is handled: an error leaves the
	// delivery unhandled and unacknowledged, for the server to deliver
	// again after AckWait (to whichever instance is active then). A
	// service with a lease passes its Runtime.Current: an instance paused
	// past its lease's TTL, whose stand-by has taken over, must not act on
	// the deliveries it had fetched before the pause when it resumes.
	Gate func() error
	// HeldBack, if set, is told the subject of each delivery Gate held
	// back: a handler that keeps state folded from its deliveries in log
	// order forgets that aggregate's, since the deliveries after the one
	// held back may be handled before it comes back (a lease fresh again a
	// moment later).
	HeldBack func(subject string)

	Logger *slog.Logger
}

func (cfg *ConsumerConfig) defaults() {
	if cfg.Stream == "" {
		cfg.Stream = EventStream
	}
	if len(cfg.Filters) == 0 {
		cfg.Filters = EventSubjects()
		if cfg.ServerFilter == "" {
			cfg.ServerFilter = Prefix + ".>"
		}
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = 1000
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 5
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.PartitionKey == nil {
		cfg.PartitionKey = func(ev *Event) string { return ev.Subject() }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
}

// ConsumerStats are counters for health checks and tests.
type ConsumerStats struct {
	Handled      uint64 `json:"handled"`       // events handled and acknowledged
	DeadLettered uint64 `json:"dead_lettered"` // messages sent to the dead-letter stream
	Retried      uint64 `json:"retried"`       // negative acknowledgements for a retry
	Skipped      uint64 `json:"skipped"`       // delivered by ServerFilter but outside the filters, acknowledged unhandled
}

// Consumer runs a Handler over a durable JetStream consumer.
type Consumer struct {
	cfg     ConsumerConfig
	bus     *Bus
	handler Handler
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	obs    Observer
	jc     jetstream.ConsumerConfig // as created: a lost durable is made again from it
	pull   int

	ccmu     sync.Mutex
	cc       jetstream.ConsumeContext // replaced when the durable is recreated
	stopping bool
	lost     chan error // a sign that the durable is gone (buffered, 1)
	// floor is the highest stream sequence known to be acknowledged (the
	// server's ack floor, as last read by Info or at creation): a
	// recreated durable starts after it, so nothing unacknowledged is
	// skipped.
	floor atomic.Uint64
	// lostErr is why the durable is gone, while it is (nil otherwise).
	lostErr atomic.Pointer[error]
	queues  []chan *Delivery
	// qmu guards sending to and closing the queues: after a drain times
	// out, the client may still be delivering while Stop closes them.
	qmu     sync.RWMutex
	qclosed bool
	wg      sync.WaitGroup // workers
	held    sync.WaitGroup // held deliveries

	handled, dead, retried, skipped atomic.Uint64
	// gated counts the deliveries the gate held back, for the log.
	gated Tally
	// lastDelivery is the consumer sequence of the last message this
	// process received (see Delivery.afterPrevious).
	lastDelivery atomic.Uint64
	stopOnce     sync.Once

	// inflight counts, per stream sequence, the deliveries this process has
	// queued or is handling: a redelivery of one of them means a backlog or
	// a slow handler here, not a handler that never finished.
	imu      sync.Mutex
	inflight map[uint64]int
	// nakked counts the deliveries of a message this process finished
	// with a retry (a handler error) or adopted while holding it: they
	// were not crashes, so the guard against crash loops does not count
	// them.
	nakked map[uint64]int
	// heldBack counts, of those, the deliveries the gate held back (not a
	// try of the handler either: finish does not count them).
	heldBack map[uint64]int
	// holding are the held deliveries (Hold) by stream sequence: a
	// redelivery of one is adopted by it, not handled again.
	holding map[uint64]*Delivery

	// only are the filters when the server filters by ServerFilter: a
	// message matching none is acknowledged unhandled.
	only []string
}

// Consume creates or updates the durable consumer and starts handling. Bad
// messages (not decodable, missing attributes, unknown type, schema
// violation, wrong subject) are dead-lettered with their reason and
// acknowledged before any handler sees them.
func Consume(ctx context.Context, bus *Bus, cfg ConsumerConfig, h Handler) (*Consumer, error) {
	cfg.defaults()
	if cfg.Name == "" {
		return nil, errors.New("consumer needs a name")
	}
	deliver := jetstream.DeliverAllPolicy
	if cfg.DeliverNew {
		deliver = jetstream.DeliverNewPolicy
	}
	jc := jetstream.ConsumerConfig{
		Durable:        cfg.Name,
		Description:    cfg.Description,
		FilterSubjects: cfg.Filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.AckWait,
		MaxAckPending:  cfg.MaxAckPending,
		MaxDeliver:     -1, // heed dead-letters itself, so the server never silently gives up
		DeliverPolicy:  deliver,
	}
	// only: the subjects handled; a delivery outside them is acknowledged
	// unhandled. Beyond a ServerFilter's extra, it guards against a
	// server-side filter that is not this process's: the consumer's
	// configuration is the last starter's, and during a rolling upgrade
	// that can be an older instance's wider filter.
	only := cfg.Filters
	if cfg.ServerFilter != "" {
		for _, f := range cfg.Filters {
			if !subjectMatches(cfg.ServerFilter, f) {
				return nil, fmt.Errorf("consumer %s: server filter %s does not cover filter %s", cfg.Name, cfg.ServerFilter, f)
			}
		}
		jc.FilterSubject, jc.FilterSubjects = cfg.ServerFilter, nil
	} else if len(cfg.Filters) == 1 {
		jc.FilterSubject, jc.FilterSubjects = cfg.Filters[0], nil
	}
	var cons jetstream.Consumer
	err := WhileUnavailable(ctx, func() error {
		var err error
		cons, err = bus.js.CreateOrUpdateConsumer(ctx, cfg.Stream, jc)
		if errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported) {
			// nats-server 2.15 answers the first update of a consumer it
			// recovered at start with the consumer's information as
			// recovered, not as updated (the cached "initial info"), so a
			// change from one filter to several (the runner's upgrade from
			// heed.>) reads as refused although it was applied. The second
			// answer is current: ask again.
			cons, err = bus.js.CreateOrUpdateConsumer(ctx, cfg.Stream, jc)
		}
		if err != nil {
			// A durable recreated after it was lost starts at a sequence
			// (see recreate), and a deliver policy cannot be updated: keep it.
			if old, oerr := bus.js.Consumer(ctx, cfg.Stream, cfg.Name); oerr == nil && old.CachedInfo().Config.DeliverPolicy != jc.DeliverPolicy {
				jc.DeliverPolicy, jc.OptStartSeq, jc.OptStartTime = old.CachedInfo().Config.DeliverPolicy, old.CachedInfo().Config.OptStartSeq, old.CachedInfo().Config.OptStartTime
				cons, err = bus.js.CreateOrUpdateConsumer(ctx, cfg.Stream, jc)
			}
		}
		return err
	})
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("create consumer %s on %s: %v", cfg.Name, cfg.Stream, err), Err: err}
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	log := cfg.Logger.With("consumer", cfg.Name)
	c := &Consumer{
		cfg: cfg, bus: bus, handler: Chain(h, append([]Middleware{Recover(log)}, cfg.Middleware...)...), log: log,
		ctx: cctx, cancel: cancel, inflight: map[uint64]int{}, nakked: map[uint64]int{}, heldBack: map[uint64]int{}, holding: map[uint64]*Delivery{}, obs: bus.observer(), jc: jc, lost: make(chan error, 1), only: only,
	}
	c.noteFloor(cons.CachedInfo())
	// A short queue per worker: what waits here has been delivered, so its
	// ack wait is running. With long queues (up to MaxAckPending, which is
	// there to bound held deliveries) a backlog waited here longer than the
	// ack wait and came back as redeliveries, handled twice (the runner,
	// 5 s ack wait, under 10,000 runs opened at once: 11,000 delivered and
	// unacknowledged, 480 redelivered, 50 MB of messages in memory). A full
	// queue blocks delivery, and the backlog waits in the stream instead.
	buffer := max(cfg.MaxAckPending/cfg.Workers, 1)
	buffer = min(buffer, 64)
	for range cfg.Workers {
		q := make(chan *Delivery, buffer)
		c.queues = append(c.queues, q)
		c.wg.Add(1)
		go c.work(q)
	}
	// MaxAckPending (on the server) bounds what is in flight; the pull batch
	// only has to keep a request open. nats.go (v1.55) re-pulls only while a
	// message arrives below its threshold and skips that check while the
	// previous pull is still being sent; if every check is skipped no pull is
	// open and the consumer waits for the missed-heartbeat check (2x the
	// heartbeat, 30 s by default). A batch of at least 8 leaves several
	// checks (a batch of 1 leaves one), and a 1 s heartbeat bounds the stall
	// when they are all lost.
	c.pull = min(max(cfg.MaxAckPending, 8), 500)
	c.cc, err = c.start(cons)
	if err != nil {
		cancel()
		for _, q := range c.queues {
			close(q)
		}
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("start consumer %s: %v", cfg.Name, err), Err: err}
	}
	go c.supervise()
	c.obs.ConsumerStarted(c)
	return c, nil
}

func (c *Consumer) start(cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
	return cons.Consume(c.receive,
		jetstream.PullMaxMessages(c.pull),
		jetstream.PullHeartbeat(time.Second),
		// A pull request stays open this long (nats.go's default is 30 s):
		// while an instance is paused (SIGSTOP, a frozen VM) the server goes
		// on handing its open pulls the messages whose ack wait ran out, a
		// delivery counted each time; after a pause of MaxDeliver ack waits
		// the instance that took over would find live events "delivered 5
		// times and never finished" and dead-letter them. With short pulls
		// the paused process stops getting anything a few seconds in.
		jetstream.PullExpiry(PullExpiry),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
				c.signalLost(err)
			case errors.Is(err, jetstream.ErrNoHeartbeat):
				// The server stopped answering this pull: a durable deleted
				// while no pull was open looks like this. Ask.
				go c.checkExists()
			}
			c.log.Warn("consume error", "err", err)
		}))
}

// RecreateDelay is how long a consumer waits before it recreates its lost
// durable.
const RecreateDelay = time.Second

// Name is the durable consumer's name; Stream its stream.
func (c *Consumer) Name() string   { return c.cfg.Name }
func (c *Consumer) Stream() string { return c.cfg.Stream }

// Lost reports why the durable is gone while it is being recreated (nil
// when it is in place).
func (c *Consumer) Lost() error {
	if p := c.lostErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Info reads the durable's state from the server (for lag and health). A
// durable that is gone is recreated (see supervise).
func (c *Consumer) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	ci, err := c.bus.js.Consumer(ctx, c.cfg.Stream, c.cfg.Name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		c.signalLost(err)
	}
	if err != nil {
		return nil, err
	}
	info := ci.CachedInfo()
	c.noteFloor(info)
	return info, nil
}

func (c *Consumer) noteFloor(info *jetstream.ConsumerInfo) {
	if info == nil {
		return
	}
	f := info.AckFloor.Stream
	if info.Config.DeliverPolicy == jetstream.DeliverNewPolicy && f == 0 && info.NumAckPending == 0 {
		f = info.Delivered.Stream // a fresh DeliverNew durable starts after the stream's end
	}
	for {
		cur := c.floor.Load()
		if f <= cur || c.floor.CompareAndSwap(cur, f) {
			return
		}
	}
}

func (c *Consumer) checkExists() {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	_, _ = c.Info(ctx)
}

func (c *Consumer) signalLost(err error) {
	select {
	case c.lost <- err:
	default:
	}
}

// supervise recreates the durable when it is lost (`nats consumer rm`,
// the stream deleted and made again): with the same configuration,
// starting after the last sequence known to be acknowledged (floor), so
// nothing unacknowledged is skipped; what was acknowledged after the floor
// was last read is delivered again, which handlers (idempotent by
// contract) and projections (by sequence) absorb. Starting from the whole
// log would run every service's handlers over all history again.
func (c *Consumer) supervise() {
	for {
		var why error
		select {
		case <-c.ctx.Done():
			return
		case why = <-c.lost:
		}
		c.ccmu.Lock()
		if c.stopping {
			c.ccmu.Unlock()
			return
		}
		old := c.cc
		c.ccmu.Unlock()
		// Confirm it is gone: a stale sign must not restart a live durable.
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		_, err := c.bus.js.Consumer(ctx, c.cfg.Stream, c.cfg.Name)
		cancel()
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			if err == nil && old != nil {
				select {
				case <-old.Closed():
					// Stopped by the client (a deleted signal), yet a durable of
					// that name exists again: someone made it; consume from it.
				default:
					continue
				}
			} else {
				continue
			}
		}
		c.lostErr.Store(&why)
		c.obs.ConsumerLost(c, why)
		c.log.Warn("durable consumer is gone; recreating it", "err", why, "after_seq", c.floor.Load())
		if old != nil {
			old.Stop()
		}
		// nats-server (2.15) takes a deleted durable off its stream before
		// it removes the durable's directory: one recreated at once under
		// the same name can lose its files to that removal. Let it finish.
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(RecreateDelay):
		}
		for attempt := 0; ; attempt++ {
			from, err := c.recreate()
			if err == nil {
				c.lostErr.Store(nil)
				c.obs.ConsumerRecreated(c, from)
				c.log.Warn("durable consumer recreated", "from_seq", from)
				break
			}
			c.log.Warn("recreating the durable consumer failed; will retry", "err", err)
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(min(time.Duration(attempt+1)*250*time.Millisecond, 5*time.Second)):
			}
		}
		// Drop a sign raised by the old context's last moments.
		select {
		case <-c.lost:
		default:
		}
	}
}

// recreate makes the durable again from its configuration, starting after
// the floor, and consumes from it.
func (c *Consumer) recreate() (uint64, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	from := c.floor.Load() + 1
	jc := c.jc
	cons, err := c.bus.js.Consumer(ctx, c.cfg.Stream, c.cfg.Name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		jc.DeliverPolicy, jc.OptStartSeq, jc.OptStartTime = jetstream.DeliverByStartSequencePolicy, from, nil
		cons, err = c.bus.js.CreateConsumer(ctx, c.cfg.Stream, jc)
	}
	if err != nil {
		return 0, err
	}
	c.ccmu.Lock()
	defer c.ccmu.Unlock()
	if c.stopping {
		return from, nil
	}
	cc, err := c.start(cons)
	if err != nil {
		return 0, err
	}
	c.cc = cc
	return from, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{Handled: c.handled.Load(), DeadLettered: c.dead.Load(), Retried: c.retried.Load(), Skipped: c.skipped.Load()}
}

// Stop stops fetching, lets queued and held deliveries finish (up to the
// context's deadline) and returns. Unfinished deliveries stay unacknowledged
// and are redelivered to the next consumer instance.
func (c *Consumer) Stop(ctx context.Context) {
	c.stopOnce.Do(func() {
		c.ccmu.Lock()
		c.stopping = true
		cc := c.cc
		c.ccmu.Unlock()
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-ctx.Done():
			cc.Stop()
		}
		c.qmu.Lock()
		c.qclosed = true
		for _, q := range c.queues {
			close(q)
		}
		c.qmu.Unlock()
		done := make(chan struct{})
		go func() { c.wg.Wait(); c.held.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			c.log.Warn("stop: deliveries still in flight; they will be redelivered")
		}
		c.cancel()
		c.obs.ConsumerStopped(c)
	})
}

// receive runs on the client's delivery goroutine: gate, then dispatch.
func (c *Consumer) receive(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		c.log.Error("message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	prev := c.lastDelivery.Swap(meta.Sequence.Consumer)
	if c.only != nil && !matchesAny(c.only, msg.Subject()) {
		c.skipped.Add(1)
		_ = msg.Ack()
		return
	}
	if c.cfg.Gate != nil {
		// Before the crash-loop guard below: a delivery held back is not
		// a handler that never finished.
		if err := c.cfg.Gate(); err != nil {
			c.imu.Lock()
			c.nakked[meta.Sequence.Stream]++
			c.heldBack[meta.Sequence.Stream]++
			c.imu.Unlock()
			c.noteGated(msg.Subject(), meta.Sequence.Stream, err)
			return
		}
	}
	ev, err := c.bus.codec.DecodeStored(RawMsg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data(), Stored: meta.Timestamp})
	if err != nil {
		c.deadLetter(msg, meta, CodeOf(err), err.Error())
		return
	}
	// A delivery past MaxDeliver that this process is not already holding
	// was handed to handlers that never finished with it: the process
	// crashed, ran out of memory or was killed, every time. Running it again
	// would only do that again (a crash loop): it is dead-lettered before
	// any handler sees it.
	seq := meta.Sequence.Stream
	c.imu.Lock()
	if hd := c.holding[seq]; hd != nil {
		c.nakked[seq]++ // not a crash either: the guard below does not count it
		c.imu.Unlock()
		hd.adopt(msg, meta.NumDelivered)
		_ = msg.InProgress()
		c.log.Debug("redelivery of a held event adopted", "subject", msg.Subject(), "seq", seq, "delivered", meta.NumDelivered)
		return
	}
	held := c.inflight[seq]
	if int(meta.NumDelivered)-c.nakked[seq] > c.cfg.MaxDeliver && held == 0 {
		c.imu.Unlock()
		c.deadLetter(msg, meta, CodeUnfinished, fmt.Sprintf("delivered %d times and never finished: its handler crashed, was killed or outlived the ack wait (%s) each time", meta.NumDelivered, c.cfg.AckWait))
		return
	}
	c.inflight[seq]++
	c.imu.Unlock()
	d := &Delivery{Event: ev, Subject: msg.Subject(), Seq: meta.Sequence.Stream, Delivered: meta.NumDelivered, Stored: meta.Timestamp, msg: msg, c: c,
		afterPrevious: prev != 0 && meta.Sequence.Consumer == prev+1, behind: meta.NumPending}
	c.qmu.RLock()
	defer c.qmu.RUnlock()
	if c.qclosed {
		c.release(seq)
		return // stopping: left unacknowledged, it is redelivered to the next instance
	}
	q := c.queues[partition(c.cfg.PartitionKey(ev), len(c.queues))]
	q <- d
}

func (c *Consumer) work(q chan *Delivery) {
	defer c.wg.Done()
	for d := range q {
		if c.cfg.Gate != nil {
			if err := c.cfg.Gate(); err != nil {
				c.gatedOut(d, err)
				continue
			}
		}
		out, err := c.handler(c.ctx, d)
		d.mu.Lock()
		held := d.held
		d.mu.Unlock()
		if !held {
			c.finish(c.ctx, d, out, err)
		}
	}
}

// PullExpiry is how long a consumer's pull request stays open.
const PullExpiry = 5 * time.Second

// gatedOut leaves d unhandled and unacknowledged (Gate): the server
// delivers it again after AckWait (counted in nakked, so that this
// process's crash-loop guard does not take it for a handler that never
// finished; an instance that gets it next counts it as one delivery).
func (c *Consumer) gatedOut(d *Delivery, err error) {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	c.imu.Lock()
	c.nakked[d.Seq]++
	c.heldBack[d.Seq]++
	c.imu.Unlock()
	c.release(d.Seq)
	c.noteGated(d.Subject, d.Seq, err)
}

// noteGated tells HeldBack and logs deliveries held back, at most once a
// second.
func (c *Consumer) noteGated(subject string, seq uint64, err error) {
	if c.cfg.HeldBack != nil {
		c.cfg.HeldBack(subject)
	}
	n, log := c.gated.Add()
	if !log {
		return
	}
	c.log.Warn("deliveries left unhandled: this instance may not act now; the server delivers them again", "held_back", n, "subject", subject, "seq", seq, "why", err.Error())
}

// finish publishes the handler's events, then acknowledges; or retries or
// dead-letters on error. Called once per delivery.
// UnavailableAllowance multiplies MaxDeliver for an event whose handler
// failed because NATS or JetStream could not be reached: with the default
// backoff, about 80 s of retries instead of 8.
const UnavailableAllowance = 4

// unavailable reports whether err says NATS or JetStream could not be
// reached, rather than that the event or the handler is wrong.
func unavailable(err error) bool {
	return CodeOf(err) == CodeUnavailable || errors.Is(err, context.DeadlineExceeded) || transientJS(err)
}

func (c *Consumer) finish(ctx context.Context, d *Delivery, out []Event, err error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	// The tries the handler made: adopted redeliveries were not tries.
	msg, delivered := d.msg, max(d.Delivered, d.latest)-d.adopted
	d.mu.Unlock()
	c.imu.Lock()
	if c.holding[d.Seq] == d {
		delete(c.holding, d.Seq)
	}
	if h := uint64(c.heldBack[d.Seq]); h > 0 && delivered > 1 {
		delivered -= min(h, delivered-1) // deliveries held back were no tries
	}
	c.imu.Unlock()
	defer c.release(d.Seq)
	if err == nil && len(out) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = c.bus.PublishAll(pctx, out)
		cancel()
		if err != nil && CodeOf(err) != CodeUnavailable && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			// The handler produced an event the contract refuses: a bug that
			// retrying cannot fix.
			err = Poison(fmt.Errorf("handler produced an invalid event: %w", err))
		}
	}
	if err == nil {
		c.settled(d.Seq)
		if aerr := msg.Ack(); aerr != nil {
			c.log.Warn("ack failed; the event will be redelivered", "subject", d.Subject, "seq", d.Seq, "err", aerr)
		}
		c.handled.Add(1)
		c.obs.Consumed(c.cfg.Name, d.Event.Type(), OutcomeAcked)
		return
	}
	meta, _ := msg.Metadata()
	if errors.Is(err, ErrPoison) {
		c.settled(d.Seq)
		c.deadLetter(msg, meta, CodePoison, err.Error())
		return
	}
	limit := c.cfg.MaxDeliver
	if unavailable(err) {
		// NATS or JetStream could not be reached (a cluster electing a
		// stream's leader answers nothing for seconds): not the event's
		// fault, and dead-lettering it would leave undone what it asks
		// for (a run's first call). It gets more deliveries, still
		// bounded.
		limit *= UnavailableAllowance
	}
	if int(delivered) >= limit {
		c.settled(d.Seq)
		c.deadLetter(msg, meta, CodeHandlerFailed, fmt.Sprintf("failed %d times; last error: %v", delivered, err))
		return
	}
	delay := c.cfg.Backoff[min(int(delivered)-1, len(c.cfg.Backoff)-1)]
	c.log.Warn("handler failed; will retry", "subject", d.Subject, "seq", d.Seq, "attempt", delivered, "retry_in", delay, "err", err)
	c.retried.Add(1)
	c.obs.Consumed(c.cfg.Name, d.Event.Type(), OutcomeRetried)
	if unavailable(err) {
		c.imu.Lock()
		c.nakked[d.Seq]++
		c.imu.Unlock()
	}
	_ = msg.NakWithDelay(delay)
}

// settled forgets the retries of a message that is done with (acked or
// dead-lettered).
func (c *Consumer) settled(seq uint64) {
	c.imu.Lock()
	delete(c.nakked, seq)
	delete(c.heldBack, seq)
	c.imu.Unlock()
}

func (c *Consumer) deadLetter(msg jetstream.Msg, meta *jetstream.MsgMetadata, code Code, reason string) {
	dl := DeadLetter{
		Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data(),
		Stream: c.cfg.Stream, Consumer: c.cfg.Name, Code: code, Reason: reason,
	}
	if meta != nil {
		dl.Seq = meta.Sequence.Stream
		defer c.settled(dl.Seq)
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if err := SendDeadLetter(ctx, c.bus.js, dl); err != nil {
		// Never drop: leave it unacknowledged so it comes back.
		c.log.Error("dead-letter publish failed; will retry", "subject", dl.Subject, "seq", dl.Seq, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	c.dead.Add(1)
	c.obs.DeadLettered(c.cfg.Name, code)
	c.obs.Consumed(c.cfg.Name, msg.Headers().Get("ce-type"), OutcomeDeadLettered)
	c.log.Warn("dead-lettered", "subject", dl.Subject, "seq", dl.Seq, "code", code, "reason", reason)
	_ = msg.Ack()
}

// release forgets one delivery of seq that this process held.
func (c *Consumer) release(seq uint64) {
	c.imu.Lock()
	if c.inflight[seq] <= 1 {
		delete(c.inflight, seq)
	} else {
		c.inflight[seq]--
	}
	c.imu.Unlock()
}

func partition(key string, n int) int {
	if n == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// matchesAny reports whether subject matches one of the NATS subject
// filters ("*" one token, ">" the rest).
func matchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

func subjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		if ft == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if ft != "*" && ft != st {
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

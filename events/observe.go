package events

// Outcome is what a consumer did with one delivery.
type Outcome string

// Outcomes of a delivery.
const (
	OutcomeAcked        Outcome = "acked"         // handled, its events published, acknowledged
	OutcomeDeadLettered Outcome = "dead_lettered" // sent to HEED_DLQ and acknowledged
	OutcomeRetried      Outcome = "retried"       // negatively acknowledged for a redelivery
)

// Observer sees what a Bus publishes and what the consumers over it do:
// the hook for metrics and health (lib/service implements it; the contract
// stays free of any metrics library). Calls come from hot paths and from
// many goroutines at once: implementations must be safe for concurrent
// use, quick, and must not block.
type Observer interface {
	// Published is called once per event the stream acknowledged
	// (a duplicate, dropped by the stream, included).
	Published(eventType string)
	// Consumed is called once per delivery a consumer finished. The type
	// is "" for a message that is not a valid event.
	Consumed(consumer, eventType string, outcome Outcome)
	// DeadLettered is called once per dead letter a consumer wrote.
	DeadLettered(consumer string, code Code)
	// ConsumerStarted and ConsumerStopped bracket a consumer's life (Stop).
	ConsumerStarted(c *Consumer)
	ConsumerStopped(c *Consumer)
	// ConsumerLost is called when a consumer's durable disappeared from
	// the server (deleted, or its stream was); ConsumerRecreated once it
	// has been made again and consuming goes on from sequence from.
	ConsumerLost(c *Consumer, err error)
	ConsumerRecreated(c *Consumer, from uint64)
}

// NopObserver does nothing; embed it to implement part of Observer.
type NopObserver struct{}

func (NopObserver) Published(string)                    {}
func (NopObserver) Consumed(string, string, Outcome)    {}
func (NopObserver) DeadLettered(string, Code)           {}
func (NopObserver) ConsumerStarted(*Consumer)           {}
func (NopObserver) ConsumerStopped(*Consumer)           {}
func (NopObserver) ConsumerLost(*Consumer, error)       {}
func (NopObserver) ConsumerRecreated(*Consumer, uint64) {}

// SetObserver installs o on the bus and on every consumer started over it
// afterwards. Call it once, before the bus is used; nil removes it.
func (b *Bus) SetObserver(o Observer) {
	if o == nil {
		o = NopObserver{}
	}
	b.obs = o
}

// observer is never nil.
func (b *Bus) observer() Observer {
	if b.obs == nil {
		return NopObserver{}
	}
	return b.obs
}

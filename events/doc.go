// Package events is heed's contract: what every producer and consumer of
// heed's log shares. It is the only package every service imports.
//
// # Events
//
// Every state change in heed is a CloudEvent in the JetStream stream
// HEED_EVENTS (the log). An event's type is heed.<kind>.<verb>
// (heed.run.step.failed); its NATS subject is heed.<kind>.<aggregate-id>.<verb>
// (heed.run.r1.step.failed), so one aggregate is read with
// heed.run.r1.> and one kind of event across aggregates with
// heed.run.*.step.failed. The catalog (catalog.go) lists every type with
// its producers and consumers; each has a JSON Schema in schemas/events
// and a Go type for its data (data.go), and a test checks that the two
// agree (sdkgo_test.go, TestSamplesCoverCatalog).
//
//	ev, _ := events.NewEvent(events.RunCancelled, runID, runID+"/cancelled", "agent/bot", events.RunCancelledData{By: "agent/bot"})
//	_, err := bus.Publish(ctx, &ev)
//
// # Wire format
//
// The CloudEvents NATS binding in binary mode (codec.go): attributes are
// ce-* headers, the data is JSON, Nats-Msg-Id is the event id so JetStream
// drops a repeat. The Codec validates on the way out (Encode, Bus.Publish)
// and on the way in (Decode): a message that is not a valid heed event is
// refused with an *Error whose Code says why.
//
// # Errors
//
// Errors are data (errors.go): an *Error has a stable Code
// (schema_violation, conflict, not_found, busy, ...) that travels in dead
// letters and command replies; errors.Is(err, events.ErrConflict) matches
// on the code.
//
// # Consuming
//
// Consume (consume.go) runs a handler over a durable JetStream consumer:
// every message passes the gate first (a bad one goes to HEED_DLQ with its
// reason, dead-letter headers in dlq.go); the events a handler returns are
// published before the input is acknowledged; errors retry with backoff,
// poison and repeated failures are dead-lettered; one aggregate's events
// are handled in order. Projections (projection.go) fold events into KV
// buckets deterministically, so `heed replay` rebuilds them from the log.
// ReadHistory (logread.go) reads an aggregate's history with batched
// direct gets, leaving nothing on the server; ReadLog reads across many
// subjects or the whole log through a consumer it deletes after.
//
// # Subpackages
//
//   - events/command: the commands (heed.cmd.*), their request and reply
//     types and error replies.
//   - events/readmodel: the KV buckets, their keys and value types.
//
// Runtime pieces that are not the contract live elsewhere: the embedded
// nats-server (lib/embedded), a service's runtime (lib/service), test
// helpers (lib/eventstest). docs/EVENTS.md is the catalog for people.
package events

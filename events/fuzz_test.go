package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
)

// FuzzDecode feeds Codec.Decode arbitrary messages: a subject, a header
// block ("Name: value" lines) and a body. Decode must never panic, must
// fail only with a coded *events.Error, and whatever it accepts must
// survive a round trip through Encode and Decode unchanged. The seed
// corpus is below and in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	codec := testCodec(f)
	add := func(m *nats.Msg) { f.Add(m.Subject, []byte(formatHeader(m.Header)), m.Data) }

	// Valid binary-mode events, with and without extensions.
	for _, tc := range goldenCases {
		ev := tc.build(f)
		m, err := codec.Encode(ev)
		if err != nil {
			f.Fatalf("seed %s: %v", tc.name, err)
		}
		add(m)
	}
	for _, ev := range []*events.Event{
		newEvent(f, events.RunStarted, "r1", "e1", runStartedData),
		newEvent(f, events.ConfirmRequested, "c1", "e2", requestedData),
		newEvent(f, events.RunResumed, "r_1", "e3", resumedData),
	} {
		add(rawMsg(f, ev))
	}
	// Structured mode.
	f.Add("heed.run.r1.started", []byte("Content-Type: application/cloudevents+json\n"),
		[]byte(`{"specversion":"1.0","id":"e1","source":"urn:x","type":"heed.run.started","subject":"r1","time":"2025-03-14T15:09:26Z","datacontenttype":"application/json","traceparent":"00-ab","data":{"skill":"deploy","driver":"runner"}}`))
	f.Add("heed.run.r1.started", []byte("Content-Type: application/cloudevents+json; charset=utf-8\n"),
		[]byte(`{"specversion":"1.0","id":"e1","source":"urn:x","type":"heed.run.started","subject":"r1","data_base64":"eyJza2lsbCI6ImRlcGxveSIsImRyaXZlciI6InJ1bm5lciJ9"}`))
	f.Add("heed.run.r1.started", []byte("Content-Type: application/cloudevents+json\n"),
		[]byte(`{"data":{"skill":"deploy","driver":"runner"},"id":"e1","source":"urn:x","type":"heed.run.started","subject":"r1","specversion":"1.0","count":3,"flag":true}`))
	// Structured-mode attributes binary mode treats differently.
	f.Add("heed.run.r1.started", []byte("Content-Type: application/cloudevents+json\n"),
		[]byte(`{"specversion":"1.0","id":" e1 ","source":"a b","type":"heed.run.started","subject":"r1","data":{"skill":"deploy","driver":"runner"}}`))
	f.Add("heed.run.r1.started", []byte("Content-Type: application/cloudevents+json\n"),
		[]byte(`{"specversion":"1.0","id":"e1","source":"urn:x","type":"heed.run.started","subject":"r1","abcdefghijklmnopqrstuvwxyz":"x","Upper":"y","data":{"skill":"deploy","driver":"runner"}}`))
	// Percent-encoded values, good and bad.
	f.Add("heed.run.r1.started", []byte("ce-specversion: 1.0\nce-id: a%20b%25c%22%C3%BC\nce-source: urn:x\nce-type: heed.run.started\nce-subject: r1\nce-causationid: x%20y%25z%22%C3%BC\n"), []byte(runStartedData))
	f.Add("heed.run.r1.started", []byte("ce-specversion: 1.0\nce-id: e%2\nce-source: urn:x\nce-type: heed.run.started\nce-subject: r1\n"), []byte(runStartedData))
	f.Add("heed.run.r1.started", []byte("ce-specversion: 1.0\nce-id: e1\nce-source: urn:x\nce-type: heed.run.started\nce-subject: r%2E1\n"), []byte(runStartedData))
	// Garbage and near misses.
	f.Add("heed.run.r1.started", []byte(""), []byte("\x00\xffgarbage"))
	f.Add("", []byte("ce-specversion: 1.0\n"), []byte("{}"))
	f.Add("heed.run.r1.started", []byte("ce-specversion: 1.0\nce-id: e1\nce-source: urn:x\nce-type: heed.run.started\nce-subject: r1\nce-time: 0000-01-01T00:00:00+01:00\n"), []byte(runStartedData))
	f.Add("heed.run.r1.started", []byte("Content-Type: application/cloudevents+json\n"), []byte(`{"specversion":"0.3","id":"e1"}`))

	f.Fuzz(func(t *testing.T, subject string, header []byte, body []byte) {
		msg := &nats.Msg{Subject: subject, Header: parseHeader(header), Data: body}
		ev, err := codec.Decode(msg)
		if err != nil {
			var e *events.Error
			if !errors.As(err, &e) || e.Code == "" {
				t.Fatalf("Decode error %v (%T) is not a coded *events.Error", err, err)
			}
			if ev != nil {
				t.Fatalf("Decode returned an event with error %v", err)
			}
			return
		}
		enc, err := codec.Encode(ev)
		if err != nil {
			t.Fatalf("Decode accepted an event Encode refuses: %v\nevent: %s", err, ev)
		}
		if enc.Subject != subject {
			t.Fatalf("re-encoded subject %q, decoded from %q", enc.Subject, subject)
		}
		again, err := codec.Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v\nheaders: %v\nevent: %s", err, enc.Header, ev)
		}
		for _, c := range []struct{ attr, got, want string }{
			{"id", again.ID(), ev.ID()},
			{"type", again.Type(), ev.Type()},
			{"subject", again.Subject(), ev.Subject()},
			{"source", again.Source(), ev.Source()},
		} {
			if c.got != c.want {
				t.Errorf("%s changed in the round trip: %q, was %q", c.attr, c.got, c.want)
			}
		}
		if !again.Time().Equal(ev.Time()) {
			t.Errorf("time changed in the round trip: %s, was %s", again.Time(), ev.Time())
		}
		if !bytes.Equal(again.Data(), ev.Data()) {
			t.Errorf("data changed in the round trip: %q, was %q", again.Data(), ev.Data())
		}
		if !json.Valid(again.Data()) && len(again.Data()) > 0 {
			t.Errorf("accepted data is not JSON: %q", again.Data())
		}
	})
}

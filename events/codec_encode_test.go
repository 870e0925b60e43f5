package events

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

// encodeUncheckedReference is EncodeUnchecked as it was before it was tuned
// for speed; the tuned one must produce the same message.
func encodeUncheckedReference(ev *Event) (*nats.Msg, error) {
	h := make(nats.Header, 8)
	set := func(name, value string) {
		if value != "" {
			h[HeaderPrefix+name] = []string{percentEncode(value)}
		}
	}
	set("specversion", ev.SpecVersion())
	set("id", ev.ID())
	set("source", ev.Source())
	set("type", ev.Type())
	set("subject", ev.Subject())
	if t := ev.Time(); !t.IsZero() {
		set("time", t.UTC().Format(time.RFC3339Nano))
	}
	set("dataschema", ev.DataSchema())
	for name, v := range ev.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			return nil, err
		}
		set(name, s)
	}
	set("datacontenttype", ev.DataContentType())
	h[HeaderMsgID] = []string{ev.ID()}
	return &nats.Msg{Subject: SubjectOf(ev), Header: h, Data: ev.DataEncoded}, nil
}

func TestEncodeUncheckedMatchesReference(t *testing.T) {
	plain, err := NewEvent(RunStepCompleted, "run-1", "ev-1", "runner", map[string]any{"step": "deploy", "index": 0, "attempt": 1})
	if err != nil {
		t.Fatal(err)
	}
	odd, err := NewEvent(RunStepCompleted, "run-2", "ev 2 \"é\" 100%", "source with space", json.RawMessage(`{"step":"x","index":1,"attempt":1}`))
	if err != nil {
		t.Fatal(err)
	}
	odd.SetTime(time.Date(2024, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)))
	odd.SetDataSchema("https://heed.dev/schemas/events/heed.run.step.completed.json")
	odd.SetExtension("traceparent", "00-abc-def-01")
	odd.SetExtension("attempt", 3)
	odd.SetExtension("ok", true)
	bare, err := NewEvent(RunStarted, "run-3", "ev-3", "runner", nil)
	if err != nil {
		t.Fatal(err)
	}
	bare.SetTime(time.Time{})
	for _, ev := range []*Event{&plain, &odd, &bare} {
		got, err := EncodeUnchecked(ev)
		if err != nil {
			t.Fatal(err)
		}
		want, err := encodeUncheckedReference(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("EncodeUnchecked(%s):\n got  %#v\n want %#v", ev.ID(), got, want)
		}
		// Headers share a backing array; adding to one must not touch another.
		got.Header.Add(HeaderPrefix+"id", "second")
		got.Header.Set("Nats-Expected-Last-Subject-Sequence", "7")
		for k, v := range want.Header {
			if k == HeaderPrefix+"id" {
				v = append(v, "second")
			}
			if !reflect.DeepEqual(got.Header[k], v) {
				t.Errorf("%s after Add: %q, want %q", k, got.Header[k], v)
			}
		}
		back, err := DecodeUnchecked(&nats.Msg{Subject: want.Subject, Header: want.Header, Data: want.Data})
		if err != nil {
			t.Fatal(err)
		}
		if back.ID() != ev.ID() || back.Source() != ev.Source() || !back.Time().Equal(ev.Time()) {
			t.Errorf("round trip of %s: %v", ev.ID(), back)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	v, err := NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	c := NewCodec(v)
	ev, err := NewEvent(RunStepCompleted, "bench-run", "bench-run-1", "heed-bench",
		json.RawMessage(`{"step":"deploy","index":3,"attempt":1,"output":"deployed web-7f9c to production: 3/3 replicas healthy, rollout complete.","duration_ms":12.5}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Encode(&ev); err != nil {
			b.Fatal(err)
		}
	}
}

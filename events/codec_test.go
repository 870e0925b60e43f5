package events_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenCase is one event whose wire form is pinned.
type goldenCase struct {
	name  string
	build func(t testing.TB) *events.Event
}

var goldenCases = []goldenCase{
	{"step_failed_with_extensions", func(t testing.TB) *events.Event {
		ev := newEvent(t, events.RunStepFailed, "r-42", "01JQ7Z0000STEPFAILED000001", stepFailedData)
		ev.SetDataSchema("https://heed.dev/schemas/events/heed.run.step.failed.json")
		ev.SetExtension("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		ev.SetExtension("causationid", "x y%z\"ü")
		ev.SetExtension("correlationid", "run r-42\tretry")
		return ev
	}},
	{"confirm_answered", func(t testing.TB) *events.Event {
		return newEvent(t, events.ConfirmAnswered, "c_7", "answer:c_7", answeredData)
	}},
	{"confirm_requested_unicode", func(t testing.TB) *events.Event {
		ev := newEvent(t, events.ConfirmRequested, "Confirm-1", "id with spaces ✓", json.RawMessage(`{"message":"Überweisung bestätigen? 💸","options":[{"label":"Ja","value":"yes"}],"requester":"agent:ü"}`))
		ev.SetSource("https://heed.dev/agents/ü")
		return ev
	}},
}

// TestCodecGolden pins the wire format: subject, every header byte for
// byte, and the body. Stored events must stay decodable forever, so a
// change here is a protocol change (run with -update only on purpose).
func TestCodecGolden(t *testing.T) {
	codec := testCodec(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.build(t)
			msg, err := codec.Encode(ev)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got := renderMsg(msg)
			path := filepath.Join("testdata", "golden", tc.name+".msg")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("wire form differs from %s\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
			}

			// The pinned bytes decode back to the event, attribute by
			// attribute: what the encoder writes today and what the log
			// holds from earlier versions both read back.
			for _, src := range []struct {
				name string
				msg  *nats.Msg
			}{{"encoded", msg}, {"golden", parseRendered(t, want)}} {
				dec, err := codec.Decode(src.msg)
				if err != nil {
					t.Fatalf("Decode(%s): %v", src.name, err)
				}
				assertSameEvent(t, src.name, ev, dec)
			}

			// The same event as heed wrote it up to issue 11, with
			// ce-datacontenttype (now left out: the header budget), reads
			// back the same but for that attribute.
			old, err := os.ReadFile(filepath.Join("testdata", "golden", "issue11", tc.name+".msg"))
			if err != nil {
				t.Fatal(err)
			}
			dec, err := codec.Decode(parseRendered(t, old))
			if err != nil {
				t.Fatalf("Decode(issue 11 golden): %v", err)
			}
			withType := ev.Clone()
			withType.SetDataContentType(events.ContentTypeJSON)
			assertSameEvent(t, "issue 11 golden", &withType, dec)
		})
	}
}

func TestCodecGoldenHeaders(t *testing.T) {
	// Independent of the golden files: the properties the binding requires.
	ev := goldenCases[0].build(t)
	msg, err := testCodec(t).Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := "heed.run.r-42.step.failed"; msg.Subject != want {
		t.Errorf("subject = %q, want %q", msg.Subject, want)
	}
	want := map[string]string{
		"ce-specversion":   "1.0",
		"ce-id":            "01JQ7Z0000STEPFAILED000001",
		"ce-source":        "urn:heed:test",
		"ce-type":          "heed.run.step.failed",
		"ce-subject":       "r-42",
		"ce-time":          "2025-03-14T15:09:26.535897932Z",
		"ce-dataschema":    "https://heed.dev/schemas/events/heed.run.step.failed.json",
		"ce-traceparent":   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"ce-causationid":   "x%20y%25z%22%C3%BC",
		"ce-correlationid": "run%20r-42%09retry",
		"Nats-Msg-Id":      "01JQ7Z0000STEPFAILED000001",
	}
	got := make(map[string]string, len(msg.Header))
	for k, v := range msg.Header {
		if len(v) != 1 {
			t.Errorf("header %s has %d values, want 1", k, len(v))
		}
		got[k] = v[0]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("headers:\n got %v\nwant %v", got, want)
	}
	if !bytes.Equal(msg.Data, stepFailedData) {
		t.Errorf("body = %s, want %s", msg.Data, stepFailedData)
	}
}

// renderMsg is the golden form: the subject, the sorted headers, a blank
// line and the body bytes.
func renderMsg(m *nats.Msg) []byte {
	var b bytes.Buffer
	b.WriteString("SUBJECT " + m.Subject + "\n")
	b.WriteString(formatHeader(m.Header))
	b.WriteString("\n")
	b.Write(m.Data)
	return b.Bytes()
}

func parseRendered(t *testing.T, b []byte) *nats.Msg {
	t.Helper()
	head, body, ok := bytes.Cut(b, []byte("\n\n"))
	if !ok {
		t.Fatalf("golden file has no blank line between headers and body")
	}
	first, rest, _ := bytes.Cut(head, []byte("\n"))
	subject, ok := strings.CutPrefix(string(first), "SUBJECT ")
	if !ok {
		t.Fatalf("golden file does not start with SUBJECT: %q", first)
	}
	return &nats.Msg{Subject: subject, Header: parseHeader(rest), Data: body}
}

// assertSameEvent compares every CloudEvents attribute, every extension
// and the data.
func assertSameEvent(t *testing.T, label string, want, got *events.Event) {
	t.Helper()
	check := func(attr, g, w string) {
		t.Helper()
		if g != w {
			t.Errorf("%s: %s = %q, want %q", label, attr, g, w)
		}
	}
	check("specversion", got.SpecVersion(), want.SpecVersion())
	check("id", got.ID(), want.ID())
	check("source", got.Source(), want.Source())
	check("type", got.Type(), want.Type())
	check("subject", got.Subject(), want.Subject())
	check("datacontenttype", got.DataContentType(), want.DataContentType())
	check("dataschema", got.DataSchema(), want.DataSchema())
	if !got.Time().Equal(want.Time()) {
		t.Errorf("%s: time = %s, want %s", label, got.Time(), want.Time())
	}
	if !reflect.DeepEqual(got.Extensions(), want.Extensions()) {
		t.Errorf("%s: extensions = %#v, want %#v", label, got.Extensions(), want.Extensions())
	}
	if !bytes.Equal(got.Data(), want.Data()) {
		t.Errorf("%s: data = %s, want %s", label, got.Data(), want.Data())
	}
}

func TestDecodeStructuredMode(t *testing.T) {
	codec := testCodec(t)
	ev := goldenCases[0].build(t)
	sdkJSON, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	// What another CloudEvents library would write, keys in any order.
	handJSON := []byte(`{
		"data": {"step":"fetch","index":2,"attempt":1,"error":{"message":"connection refused","kind":"network"}},
		"causationid": "x y%z\"ü",
		"correlationid": "run r-42\tretry",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"specversion": "1.0",
		"type": "heed.run.step.failed",
		"source": "urn:heed:test",
		"id": "01JQ7Z0000STEPFAILED000001",
		"subject": "r-42",
		"time": "2025-03-14T15:09:26.535897932Z",
		"dataschema": "https://heed.dev/schemas/events/heed.run.step.failed.json",
		"datacontenttype": "application/json"
	}`)
	base64JSON := []byte(`{"specversion":"1.0","type":"heed.run.step.failed","source":"urn:heed:test",
		"id":"01JQ7Z0000STEPFAILED000001","subject":"r-42","time":"2025-03-14T16:09:26.535897932+01:00",
		"dataschema":"https://heed.dev/schemas/events/heed.run.step.failed.json","datacontenttype":"application/json",
		"causationid":"x y%z\"ü","correlationid":"run r-42\tretry",
		"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"data_base64":"` + b64(stepFailedData) + `"}`)

	for _, tc := range []struct {
		name string
		ct   string
		body []byte
	}{
		{"sdk-go marshal", events.ContentTypeStructured, sdkJSON},
		{"hand written", events.ContentTypeStructured, handJSON},
		{"charset parameter", events.ContentTypeStructured + "; charset=utf-8", handJSON},
		{"data_base64", events.ContentTypeStructured, base64JSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &nats.Msg{Subject: "heed.run.r-42.step.failed", Header: nats.Header{events.HeaderContentType: {tc.ct}}, Data: tc.body}
			got, err := codec.Decode(msg)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			// Structured JSON may re-indent data; compare it as JSON.
			if !jsonEq(t, got.Data(), ev.Data()) {
				t.Errorf("data = %s, want %s", got.Data(), ev.Data())
			}
			got.DataEncoded = ev.DataEncoded
			want := ev
			if tc.name != "sdk-go marshal" { // these name datacontenttype
				w := ev.Clone()
				w.SetDataContentType(events.ContentTypeJSON)
				want = &w
			}
			assertSameEvent(t, tc.name, want, got)
		})
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func jsonEq(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestDecodePercentEncoding(t *testing.T) {
	codec := testCodec(t)
	for _, tc := range []struct {
		name, header, want string
	}{
		{"plain", "abc", "abc"},
		{"upper hex", "x%20y%25z%22%C3%BC", "x y%z\"ü"},
		{"lower hex", "x%20y%25z%22%c3%bc", "x y%z\"ü"},
		{"only escapes", "%41%42%43", "ABC"},
		{"escape at end", "a%2F", "a/"},
		{"not required but harmless", "%61", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := rawMsg(t, goldenCases[1].build(t))
			msg.Header.Set("ce-causationid", tc.header)
			ev, err := codec.Decode(msg)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := ev.Extensions()["causationid"]; got != tc.want {
				t.Errorf("causationid = %#v, want %q", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"%", "a%", "a%2", "%zz", "%2G", "%%41", "abc%g0"} {
		t.Run("bad "+bad, func(t *testing.T) {
			for _, header := range []string{"ce-causationid", "ce-id", "ce-source"} {
				msg := rawMsg(t, goldenCases[1].build(t))
				msg.Header.Set(header, bad)
				_, err := codec.Decode(msg)
				if !errors.Is(err, events.ErrUndecodable) {
					t.Fatalf("%s: %q: err = %v, want %s", header, bad, err, events.CodeUndecodable)
				}
				if !strings.Contains(err.Error(), header) {
					t.Errorf("%s: error %q does not name the header", header, err)
				}
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	codec := testCodec(t)
	valid := func(t *testing.T) *nats.Msg {
		return rawMsg(t, newEvent(t, events.RunStepFailed, "r1", "e1", stepFailedData))
	}
	del := func(name string) func(*nats.Msg) { return func(m *nats.Msg) { delete(m.Header, name) } }
	set := func(name, value string) func(*nats.Msg) { return func(m *nats.Msg) { m.Header.Set(name, value) } }

	for _, tc := range []struct {
		name     string
		msg      func(t *testing.T) *nats.Msg
		mutate   func(*nats.Msg)
		sentinel *events.Error
		contains []string // the message must name what is wrong
	}{
		{"garbage, no headers",
			func(*testing.T) *nats.Msg {
				return &nats.Msg{Subject: "heed.run.r1.started", Data: []byte("\x00\xffnot an event")}
			},
			nil, events.ErrUndecodable, []string{"no CloudEvents headers"}},
		{"valid JSON, no headers",
			func(*testing.T) *nats.Msg { return &nats.Msg{Subject: "heed.run.r1.started", Data: runStartedData} },
			nil, events.ErrUndecodable, []string{"binary mode"}},
		{"headers but no ce-specversion", valid, del("ce-specversion"), events.ErrUndecodable, []string{"ce-specversion"}},
		{"unsupported specversion", valid, set("ce-specversion", "0.3"), events.ErrUndecodable, []string{"0.3"}},
		{"bad ce-time", valid, set("ce-time", "yesterday"), events.ErrUndecodable, []string{"ce-time", "yesterday"}},
		{"ce-time before year 0 in UTC", valid, set("ce-time", "0000-01-01T00:00:00+01:00"), events.ErrUndecodable, []string{"RFC 3339"}},
		{"ce-time after year 9999 in UTC", valid, set("ce-time", "9999-12-31T23:30:00-01:00"), events.ErrUndecodable, []string{"RFC 3339"}},
		{"structured time after year 9999 in UTC",
			func(*testing.T) *nats.Msg {
				return &nats.Msg{Subject: "heed.run.r1.started", Header: nats.Header{"Content-Type": {events.ContentTypeStructured}},
					Data: []byte(`{"specversion":"1.0","id":"e1","source":"urn:x","type":"heed.run.started","subject":"r1","time":"9999-12-31T23:30:00-01:00","data":{"skill":"deploy","driver":"runner"}}`)}
			},
			nil, events.ErrUndecodable, []string{"RFC 3339"}},
		{"invalid extension name", valid, set("ce-trace_id", "x"), events.ErrUndecodable, []string{"trace_id"}},
		{"structured body not JSON",
			func(*testing.T) *nats.Msg {
				return &nats.Msg{Subject: "heed.run.r1.started", Header: nats.Header{"Content-Type": {events.ContentTypeStructured}}, Data: []byte("{nope")}
			},
			nil, events.ErrUndecodable, []string{"structured"}},
		{"structured id with surrounding whitespace",
			func(*testing.T) *nats.Msg {
				return &nats.Msg{Subject: "heed.run.r1.started", Header: nats.Header{"Content-Type": {events.ContentTypeStructured}},
					Data: []byte(`{"specversion":"1.0","id":" e1 ","source":"urn:x","type":"heed.run.started","subject":"r1","data":{"skill":"deploy","driver":"runner"}}`)}
			},
			nil, events.ErrUndecodable, []string{`" e1 "`}},
		{"structured extension name binary mode refuses",
			func(*testing.T) *nats.Msg {
				return &nats.Msg{Subject: "heed.run.r1.started", Header: nats.Header{"Content-Type": {events.ContentTypeStructured}},
					Data: []byte(`{"specversion":"1.0","id":"e1","source":"urn:x","type":"heed.run.started","subject":"r1","averyveryverylongextension":"x","data":{"skill":"deploy","driver":"runner"}}`)}
			},
			nil, events.ErrUndecodable, []string{"averyveryverylongextension"}},
		{"structured without specversion",
			func(*testing.T) *nats.Msg {
				return &nats.Msg{Subject: "heed.run.r1.started", Header: nats.Header{"Content-Type": {events.ContentTypeStructured}}, Data: []byte(`{"id":"x"}`)}
			},
			nil, events.ErrUndecodable, []string{"specversion"}},

		{"missing ce-id", valid, del("ce-id"), events.ErrMissingAttribute, []string{"id"}},
		{"empty ce-id", valid, set("ce-id", ""), events.ErrMissingAttribute, []string{"id"}},
		{"missing ce-source", valid, del("ce-source"), events.ErrMissingAttribute, []string{"source"}},
		{"missing ce-type", valid, del("ce-type"), events.ErrMissingAttribute, []string{"type"}},
		{"missing ce-subject", valid, del("ce-subject"), events.ErrMissingAttribute, []string{"subject"}},
		{"missing everything but specversion", valid,
			func(m *nats.Msg) { m.Header = nats.Header{"ce-specversion": {"1.0"}} },
			events.ErrMissingAttribute, []string{"id", "source", "type", "subject"}},

		{"unknown type",
			func(t *testing.T) *nats.Msg {
				return rawMsg(t, newEvent(t, events.Type("heed.run.exploded"), "r1", "e1", runStartedData))
			},
			nil, events.ErrUnknownType, []string{"heed.run.exploded"}},
		{"type outside heed", valid,
			func(m *nats.Msg) { m.Header.Set("ce-type", "com.example.thing") },
			events.ErrUnknownType, []string{"com.example.thing"}},

		{"missing required property",
			func(t *testing.T) *nats.Msg {
				return rawMsg(t, newEvent(t, events.RunStarted, "r1", "e1", json.RawMessage(`{"skill":"deploy"}`)))
			},
			nil, events.ErrSchemaViolation, []string{"heed.run.started", "at /", "driver"}},
		{"wrong type deep inside",
			func(t *testing.T) *nats.Msg {
				return rawMsg(t, newEvent(t, events.RunStepFailed, "r1", "e1",
					json.RawMessage(`{"step":"fetch","index":2,"attempt":1,"error":{"message":42}}`)))
			},
			nil, events.ErrSchemaViolation, []string{"at /error/message"}},
		{"negative index",
			func(t *testing.T) *nats.Msg {
				return rawMsg(t, newEvent(t, events.RunStepFailed, "r1", "e1",
					json.RawMessage(`{"step":"fetch","index":-1,"attempt":1,"error":{"message":"x"}}`)))
			},
			nil, events.ErrSchemaViolation, []string{"at /index"}},
		{"bad option in array",
			func(t *testing.T) *nats.Msg {
				return rawMsg(t, newEvent(t, events.ConfirmRequested, "c1", "e1",
					json.RawMessage(`{"message":"ok?","options":[{"label":"Yes","value":"yes"},{"label":"No"}],"requester":"r"}`)))
			},
			nil, events.ErrSchemaViolation, []string{"at /options/1", "value"}},
		{"additional property",
			func(t *testing.T) *nats.Msg {
				return rawMsg(t, newEvent(t, events.ConfirmAnswered, "c1", "e1",
					json.RawMessage(`{"choice":"yes","method":"user","by":"alice","sneaky":true}`)))
			},
			nil, events.ErrSchemaViolation, []string{"sneaky"}},
		{"data not JSON", valid, func(m *nats.Msg) { m.Data = []byte("{oops") }, events.ErrSchemaViolation, []string{"not JSON"}},
		{"trailing data", valid, func(m *nats.Msg) { m.Data = append(append([]byte{}, stepFailedData...), " {}"...) }, events.ErrSchemaViolation, []string{"trailing"}},
		{"no data", valid, func(m *nats.Msg) { m.Data = nil }, events.ErrSchemaViolation, []string{"heed.run.step.failed"}},
		{"non-JSON content type", valid, set("ce-datacontenttype", "text/plain"), events.ErrSchemaViolation, []string{"text/plain"}},
		{"non-JSON Content-Type from an older producer", valid, func(m *nats.Msg) {
			delete(m.Header, "ce-datacontenttype")
			m.Header.Set("Content-Type", "text/plain")
		}, events.ErrSchemaViolation, []string{"text/plain"}},

		{"subject of another aggregate", valid,
			func(m *nats.Msg) { m.Subject = "heed.run.r2.step.failed" },
			events.ErrSubjectMismatch, []string{"heed.run.r1.step.failed", "heed.run.r2.step.failed"}},
		{"subject of another verb", valid,
			func(m *nats.Msg) { m.Subject = "heed.run.r1.step.completed" },
			events.ErrSubjectMismatch, []string{"heed.run.r1.step.failed"}},

		{"aggregate id with a dot", valid, set("ce-subject", "r.1"), events.ErrInvalidID, []string{`"r.1"`}},
		{"aggregate id with a space", valid, set("ce-subject", "r%201"), events.ErrInvalidID, []string{`"r 1"`}},
		{"aggregate id with a wildcard", valid, set("ce-subject", "r*"), events.ErrInvalidID, []string{`"r*"`}},
		{"aggregate id too long", valid, set("ce-subject", strings.Repeat("a", events.MaxIDLength+1)), events.ErrInvalidID, nil},

		{"too large", valid,
			func(m *nats.Msg) {
				m.Data = []byte(`{"step":"fetch","index":2,"attempt":1,"error":{"message":"` + strings.Repeat("x", events.MaxEventBytes) + `"}}`)
			},
			events.ErrTooLarge, []string{"bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.msg(t)
			if tc.mutate != nil {
				tc.mutate(msg)
			}
			ev, err := codec.Decode(msg)
			if err == nil {
				t.Fatalf("Decode succeeded (%s %s), want %s", ev.Type(), ev.ID(), tc.sentinel.Code)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("err = %v (code %s), want code %s", err, events.CodeOf(err), tc.sentinel.Code)
			}
			if ev != nil {
				t.Errorf("Decode returned an event with its error")
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			// errors.Is must not match any other code.
			for _, other := range []*events.Error{events.ErrUndecodable, events.ErrMissingAttribute, events.ErrUnknownType,
				events.ErrSchemaViolation, events.ErrSubjectMismatch, events.ErrInvalidID, events.ErrTooLarge} {
				if other != tc.sentinel && errors.Is(err, other) {
					t.Errorf("err %v also matches %s", err, other.Code)
				}
			}
		})
	}
}

func TestDecodeValidBinaryVariants(t *testing.T) {
	// Things a foreign binary-mode producer may do that are still valid.
	codec := testCodec(t)
	for _, tc := range []struct {
		name   string
		mutate func(*nats.Msg)
	}{
		{"upper-case header names", func(m *nats.Msg) {
			for k, v := range m.Header {
				if strings.HasPrefix(k, "ce-") {
					delete(m.Header, k)
					m.Header["CE-"+strings.ToUpper(k[3:])] = v
				}
			}
		}},
		{"no Nats-Msg-Id", func(m *nats.Msg) { delete(m.Header, "Nats-Msg-Id") }},
		{"no ce-time", func(m *nats.Msg) { delete(m.Header, "ce-time") }},
		{"no datacontenttype", func(m *nats.Msg) { delete(m.Header, "ce-datacontenttype") }},
		{"Content-Type instead of ce-datacontenttype (older producers)", func(m *nats.Msg) {
			delete(m.Header, "ce-datacontenttype")
			m.Header.Set("Content-Type", "application/json")
		}},
		{"time with offset", func(m *nats.Msg) { m.Header.Set("ce-time", "2025-03-14T16:09:26.535897932+01:00") }},
		{"unrelated headers", func(m *nats.Msg) { m.Header.Set("X-Whatever", "1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := newEvent(t, events.RunStepFailed, "r1", "e1", stepFailedData)
			msg := rawMsg(t, want)
			tc.mutate(msg)
			got, err := codec.Decode(msg)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got.ID() != "e1" || got.Type() != string(events.RunStepFailed) || got.Subject() != "r1" || !bytes.Equal(got.Data(), stepFailedData) {
				t.Errorf("decoded %s", got)
			}
			if _, ok := msg.Header["ce-time"]; ok && !got.Time().Equal(fixedTime) {
				t.Errorf("time = %s, want %s", got.Time(), fixedTime)
			}
		})
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	codec := testCodec(t)
	for _, tc := range []struct {
		name     string
		ev       *events.Event
		sentinel *events.Error
	}{
		{"schema violation", newEvent(t, events.RunStarted, "r1", "e1", json.RawMessage(`{}`)), events.ErrSchemaViolation},
		{"unknown type", newEvent(t, "heed.run.nope", "r1", "e1", runStartedData), events.ErrUnknownType},
		{"invalid id", newEvent(t, events.RunStarted, "r.1", "e1", runStartedData), events.ErrInvalidID},
		{"time RFC 3339 cannot write", func() *events.Event {
			ev := newEvent(t, events.RunStarted, "r1", "e1", runStartedData)
			ev.SetTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
			return ev
		}(), events.ErrUndecodable},
		{"valid at the edge of time", func() *events.Event {
			ev := newEvent(t, events.RunStarted, "r1", "e1", runStartedData)
			ev.SetTime(time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC))
			return ev
		}(), nil},
		{"valid", newEvent(t, events.RunStarted, "r1", "e1", runStartedData), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := codec.Encode(tc.ev)
			if tc.sentinel == nil {
				if err != nil {
					t.Fatalf("Encode: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("Encode err = %v, want %s", err, tc.sentinel.Code)
			}
			if msg != nil {
				t.Errorf("Encode returned a message with its error")
			}
		})
	}
}

// TestHostileInputsRefusedCheaply: what any publisher can put on heed.> is
// refused before a parser or the schema validator pays for it.
func TestHostileInputsRefusedCheaply(t *testing.T) {
	codec := testCodec(t)
	base := func() *nats.Msg {
		return rawMsg(t, newEvent(t, events.RunStepFailed, "r1", "e1", stepFailedData))
	}
	deep := base()
	deep.Data = []byte(`{"step":"x","index":0,"attempt":1,"error":{"message":"m"},"output":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`)
	bigHeader := base()
	bigHeader.Header.Set("ce-padding", strings.Repeat("p", 60000))
	manyHeaders := base()
	for i := range 100 {
		manyHeaders.Header.Set(fmt.Sprintf("x-h%d", i), "v")
	}
	for _, tc := range []struct {
		name string
		msg  *nats.Msg
		want error
		says string
	}{
		{"9,000-deep data", deep, events.ErrSchemaViolation, "deeper than 64"},
		{"a 60 KB extension header", bigHeader, events.ErrTooLarge, "the limit is 4096"},
		{"100 headers", manyHeaders, events.ErrTooLarge, "headers; the limit is 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := codec.Decode(tc.msg)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Decode: %v; want %v saying %q", err, tc.want, tc.says)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; took > 100*time.Millisecond*raceSlowdown || alloc > 1<<20 {
				t.Errorf("refusing it took %s and %d KiB", took, alloc>>10)
			}
		})
	}
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"run_id":"r1","reason":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`)
	if err := v.ValidateCommand("heed.cmd.run.cancel", body); !errors.Is(err, events.ErrInvalidRequest) || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("a 9,000-deep command: %v", err)
	}
}

// TestHeaderLimitsHoldForTheEncodedForm: a value that fits the limits as it
// arrived (raw bytes in a header, or any length in structured mode) but not
// once percent-encoded is refused, by Decode and by Encode alike, so that
// whatever heed accepts re-encodes to a message heed accepts. Found by
// FuzzDecode: a 1,366-byte id of raw 0xC1 bytes decoded, and its encoding
// (4,098 bytes) did not.
func TestHeaderLimitsHoldForTheEncodedForm(t *testing.T) {
	codec := testCodec(t)
	rawID := strings.Repeat("\xc1", 1366)
	binary := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e1", runStartedData))
	binary.Header.Set("ce-id", rawID)
	if _, err := codec.Decode(binary); !errors.Is(err, events.ErrTooLarge) || !strings.Contains(err.Error(), "encoded") {
		t.Errorf("raw 0xC1 id: %v; want too_large (encoded)", err)
	}
	structured := &nats.Msg{Subject: "heed.run.r1.started", Header: nats.Header{"Content-Type": {events.ContentTypeStructured}},
		Data: []byte(`{"specversion":"1.0","id":"` + strings.Repeat("é", 1400) + `","source":"urn:x","type":"heed.run.started","subject":"r1","data":` + string(runStartedData) + `}`)}
	if _, err := codec.Decode(structured); !errors.Is(err, events.ErrTooLarge) {
		t.Errorf("structured id of 1,400 é: %v; want too_large", err)
	}
	many := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e1", runStartedData))
	for i := range 12 {
		many.Header.Set(fmt.Sprintf("ce-x%d", i), strings.Repeat("\xc3\xa9", 650)) // 1,300 bytes raw, 3,900 encoded
	}
	if _, err := codec.Decode(many); !errors.Is(err, events.ErrTooLarge) || !strings.Contains(err.Error(), "headers are") {
		t.Errorf("12 extensions of 1,300 raw bytes: %v; want too_large (all headers)", err)
	}
	ev := newEvent(t, events.RunStarted, "r1", strings.Repeat("é", 1400), runStartedData)
	if _, err := codec.Encode(ev); !errors.Is(err, events.ErrTooLarge) {
		t.Errorf("Encode of an id of 1,400 é: %v; want too_large", err)
	}
	// At the limit exactly: accepted and round-trips.
	ok := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e1", runStartedData))
	ok.Header.Set("ce-id", strings.Repeat("\xc3\xa9", events.MaxHeaderValue/6))
	ev2, err := codec.Decode(ok)
	if err != nil {
		t.Fatalf("an id of %d encoded bytes: %v", events.MaxHeaderValue/6*6, err)
	}
	enc, err := codec.Encode(ev2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := codec.Decode(enc); err != nil {
		t.Errorf("re-encoded: %v", err)
	}
}

// An event Encode accepts at the header limits is still accepted when read
// back with the NATS transport headers its write added (a guard, a batch,
// a schedule purge): those count against limits of their own. Past those,
// a message is refused all the same.
func TestTransportHeadersHaveTheirOwnLimits(t *testing.T) {
	codec := testCodec(t)
	headerBytes := func(m *nats.Msg) int {
		n := 0
		for name, vs := range m.Header {
			for _, v := range vs {
				n += len(name) + len(v)
			}
		}
		return n
	}
	// Fill the event's own headers to the 16 KiB limit exactly.
	ev := newEvent(t, events.RunStarted, "r1", "e1", runStartedData)
	for i := 0; ; i++ {
		msg, err := codec.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		left := events.MaxHeaderBytes - headerBytes(msg)
		name := fmt.Sprintf("x%d", i)
		if left <= len(events.HeaderPrefix+name)+events.MaxHeaderValue {
			ev.SetExtension(name, strings.Repeat("a", left-len(events.HeaderPrefix+name)))
			break
		}
		ev.SetExtension(name, strings.Repeat("a", events.MaxHeaderValue))
	}
	msg, err := codec.Encode(ev)
	if err != nil {
		t.Fatalf("an event at the limit: %v", err)
	}
	if n := headerBytes(msg); n != events.MaxHeaderBytes {
		t.Fatalf("the event's headers are %d bytes, want %d", n, events.MaxHeaderBytes)
	}
	// What heed's writes add: a guard on a long confirmation subject, a
	// fast batch's headers, a schedule purge.
	long := strings.Repeat("c", events.MaxIDLength)
	msg.Header.Set("Nats-Expected-Last-Subject-Sequence", "18446744073709551615")
	msg.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "heed.confirm."+long+".>")
	msg.Header.Set("Nats-Batch-Id", "9f8e7d6c5b4a39281706f5e4d3c2b1a0")
	msg.Header.Set("Nats-Batch-Sequence", "1000")
	msg.Header.Set("Nats-Batch-Commit", "1")
	msg.Header.Set("Nats-Scheduler", "heed.schedule.confirm."+long)
	msg.Header.Set("Nats-Schedule-Next", "purge")
	if _, err := codec.Decode(msg); err != nil {
		t.Fatalf("read back with its write's transport headers: %v", err)
	}

	// Past the transport limits: refused, with the reason.
	many := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e2", runStartedData))
	for i := range events.MaxTransportHeaders + 1 {
		many.Header.Set(fmt.Sprintf("Nats-X-%d", i), "1")
	}
	if _, err := codec.Decode(many); !errors.Is(err, events.ErrTooLarge) || !strings.Contains(err.Error(), "transport") {
		t.Errorf("%d transport headers: %v; want too_large (transport)", events.MaxTransportHeaders+1, err)
	}
	big := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e3", runStartedData))
	big.Header.Set("Nats-X-1", strings.Repeat("a", events.MaxHeaderValue-100))
	big.Header.Set("nats-x-2", strings.Repeat("a", events.MaxHeaderValue-100)) // any case
	big.Header.Set("Nats-X-3", strings.Repeat("a", 300))
	if _, err := codec.Decode(big); !errors.Is(err, events.ErrTooLarge) || !strings.Contains(err.Error(), "transport") {
		t.Errorf("transport headers past %d bytes: %v; want too_large (transport)", events.MaxTransportHeaderBytes, err)
	}
	value := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e4", runStartedData))
	value.Header.Set("Nats-X-1", strings.Repeat("a", events.MaxHeaderValue+1))
	if _, err := codec.Decode(value); !errors.Is(err, events.ErrTooLarge) {
		t.Errorf("a transport header past %d bytes: %v; want too_large", events.MaxHeaderValue, err)
	}
	// Nats-Msg-Id is the event's own: it counts against the event's limits.
	own := rawMsg(t, newEvent(t, events.RunStarted, "r1", "e5", runStartedData))
	for i := range 4 {
		own.Header.Set(fmt.Sprintf("ce-y%d", i), strings.Repeat("a", events.MaxHeaderValue-10))
	}
	own.Header.Set(events.HeaderMsgID, strings.Repeat("a", 200))
	if _, err := codec.Decode(own); !errors.Is(err, events.ErrTooLarge) || strings.Contains(err.Error(), "transport") {
		t.Errorf("event headers past the limit with Nats-Msg-Id: %v; want too_large (not transport)", err)
	}
}

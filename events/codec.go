package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

// Wire format: the CloudEvents NATS protocol binding, binary content mode.
// Attributes travel as message headers named "ce-<attribute>" with values
// percent-encoded as the binding requires; data is the JSON payload.
// heed's own events leave datacontenttype out (it is always JSON); when an
// event has one it travels as ce-datacontenttype, an attribute like any
// other, which is how the binding and sdk-go's NATS and JetStream
// protocols read it. Content-Type is left to say that a message is in structured
// mode. Nats-Msg-Id carries the event id, so JetStream drops a republished
// event inside the duplicate window. Structured mode (Content-Type:
// application/cloudevents+json) is accepted on consume so that any
// CloudEvents library can publish to heed, and so is a binary-mode
// Content-Type: application/json from producers that predate this rule.
const (
	HeaderPrefix          = "ce-"
	HeaderContentType     = "Content-Type"
	HeaderMsgID           = "Nats-Msg-Id"
	ContentTypeJSON       = "application/json"
	ContentTypeStructured = "application/cloudevents+json"
	SpecVersion           = "1.0"

	// MaxEventBytes bounds an event's data; NATS' default max payload is 1 MiB.
	MaxEventBytes = 900 * 1024
)

// Event is the in-memory event: sdk-go's CloudEvents type.
type Event = event.Event

// Codec encodes events to NATS messages and decodes and validates messages
// into events. It is safe for concurrent use.
type Codec struct {
	v *Validator
}

// NewCodec returns a codec that validates with v.
func NewCodec(v *Validator) *Codec { return &Codec{v: v} }

// Validator returns the codec's validator.
func (c *Codec) Validator() *Validator { return c.v }

// NewEvent builds an event of type t about aggregate id with the given
// event id, source and data (marshalled to JSON). It does not validate.
func NewEvent(t Type, aggregateID, eventID, source string, data any) (Event, error) {
	ev := event.New(SpecVersion)
	ev.SetID(eventID)
	ev.SetType(string(t))
	ev.SetSource(source)
	ev.SetSubject(aggregateID)
	ev.SetTime(time.Now().UTC())
	if data != nil {
		raw, ok := data.(json.RawMessage)
		if !ok {
			b, err := json.Marshal(data)
			if err != nil {
				return ev, fmt.Errorf("marshal %s data: %w", t, err)
			}
			raw = b
		}
		// No datacontenttype: heed's data is always JSON, the attribute is
		// optional, and readers (sdk-go's codecs too) take its absence as
		// JSON. Leaving it out keeps 38 bytes off every message's headers
		// (docs/EVENTS.md, the header budget).
		ev.DataEncoded = raw
	}
	return ev, nil
}

// SubjectOf returns the NATS subject of ev.
func SubjectOf(ev *Event) string {
	return Type(ev.Type()).Subject(ev.Subject())
}

// attributes are the context attributes that Check and the encoder use,
// read once per event: sdk-go rebuilds some of them (the source, from a
// url.URL) on every call.
type attributes struct {
	specVersion, id, source, typ, subject string
}

func readAttributes(ev *Event) attributes {
	return attributes{specVersion: ev.SpecVersion(), id: ev.ID(), source: ev.Source(), typ: ev.Type(), subject: ev.Subject()}
}

// Check validates ev's attributes, id, type and data against the contract.
func (c *Codec) Check(ev *Event) error {
	a := readAttributes(ev)
	return c.check(ev, &a)
}

func (c *Codec) check(ev *Event, a *attributes) error {
	if err := checkAttributes(ev, a); err != nil {
		return err
	}
	t := Type(a.typ)
	if !t.Known() {
		return Errorf(CodeUnknownType, "unknown event type %q (see docs/EVENTS.md)", t)
	}
	if !ValidID(a.subject) {
		return Errorf(CodeInvalidID, "ce-subject %q is not a valid aggregate id (letters, digits, '-', '_'; at most %d)", a.subject, MaxIDLength)
	}
	if ct := ev.DataMediaType(); ct != "" && ct != ContentTypeJSON {
		return Errorf(CodeSchemaViolation, "%s: datacontenttype %q is not %s", t, ct, ContentTypeJSON)
	}
	if len(ev.DataEncoded) > MaxEventBytes {
		return Errorf(CodeTooLarge, "%s: data is %d bytes, more than %d", t, len(ev.DataEncoded), MaxEventBytes)
	}
	if err := checkEncodedHeaders(ev, a); err != nil {
		return err
	}
	return c.v.Validate(t, ev.DataEncoded)
}

func checkAttributes(ev *Event, a *attributes) error {
	var missing []string
	if a.specVersion == "" {
		missing = append(missing, "specversion")
	}
	if a.id == "" {
		missing = append(missing, "id")
	}
	if a.source == "" {
		missing = append(missing, "source")
	}
	if a.typ == "" {
		missing = append(missing, "type")
	}
	if a.subject == "" {
		missing = append(missing, "subject (the aggregate id)")
	}
	if len(missing) > 0 {
		return Errorf(CodeMissingAttribute, "missing CloudEvents attribute(s): %s", strings.Join(missing, ", "))
	}
	if a.specVersion != SpecVersion {
		return Errorf(CodeMissingAttribute, "specversion %q is not supported (want %s)", a.specVersion, SpecVersion)
	}
	// ce-time travels in UTC; a year RFC 3339 cannot write would be encoded
	// into a header that no decoder reads back.
	if t := ev.Time(); !t.IsZero() && (t.UTC().Year() < 0 || t.UTC().Year() > 9999) {
		return Errorf(CodeUndecodable, "time %s is outside the years 0000-9999 that RFC 3339 can represent in UTC", t)
	}
	return nil
}

// Encode validates ev and returns it as a binary-mode NATS message on its
// subject. Invalid events are refused with an *Error.
func (c *Codec) Encode(ev *Event) (*nats.Msg, error) {
	a := readAttributes(ev)
	if err := c.check(ev, &a); err != nil {
		return nil, err
	}
	return encode(ev, &a)
}

// EncodeUnchecked encodes without validation (tests and tools that need to
// produce bad input deliberately).
func EncodeUnchecked(ev *Event) (*nats.Msg, error) {
	a := readAttributes(ev)
	return encode(ev, &a)
}

func encode(ev *Event, a *attributes) (*nats.Msg, error) {
	exts := ev.Extensions()
	h := make(nats.Header, 8+len(exts))
	// Every header has one value; they share one backing array (each slice
	// has capacity 1, so an Add to one header cannot touch another).
	vals := make([]string, 0, 8+len(exts))
	set := func(key, value string) {
		if value != "" {
			vals = append(vals, percentEncode(value))
			h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	for _, f := range attributeHeaders(ev, a) {
		set(f.name, f.value)
	}
	if t := ev.Time(); !t.IsZero() {
		set(headerTime, t.UTC().Format(time.RFC3339Nano))
	}
	for name, v := range exts {
		s, err := types.Format(v)
		if err != nil {
			return nil, fmt.Errorf("extension %s: %w", name, err)
		}
		set(HeaderPrefix+name, s)
	}
	vals = append(vals, a.id)
	h[HeaderMsgID] = vals[len(vals)-1 : len(vals) : len(vals)]
	// Type(a.typ).Subject(a.subject) is SubjectOf(ev).
	return &nats.Msg{Subject: Type(a.typ).Subject(a.subject), Header: h, Data: ev.DataEncoded}, nil
}

// header is one header Encode writes (skipped when its value is empty).
type header struct{ name, value string }

// attributeHeaders are the context attributes' headers, time and
// extensions aside: what encode writes and checkEncodedHeaders measures.
func attributeHeaders(ev *Event, a *attributes) [7]header {
	return [7]header{
		{headerSpecVersion, a.specVersion}, {headerID, a.id}, {headerSource, a.source},
		{headerType, a.typ}, {headerSubject, a.subject}, {headerDataSchema, ev.DataSchema()},
		{headerDataContentType, ev.DataContentType()},
	}
}

// Header names of the context attributes, spelled out once rather than
// concatenated on every encode.
const (
	headerSpecVersion = HeaderPrefix + "specversion"
	headerID          = HeaderPrefix + "id"
	headerSource      = HeaderPrefix + "source"
	headerType        = HeaderPrefix + "type"
	headerSubject     = HeaderPrefix + "subject"
	headerTime        = HeaderPrefix + "time"
	headerDataSchema  = HeaderPrefix + "dataschema"

	headerDataContentType = HeaderPrefix + "datacontenttype"
)

// Decode turns a message into a validated event. Every failure is an *Error
// whose code says what is wrong; the message text is meant for people.
func (c *Codec) Decode(msg *nats.Msg) (*Event, error) {
	ev, err := decodeWire(msg)
	if err != nil {
		return nil, err
	}
	if err := c.Check(ev); err != nil {
		return nil, err
	}
	if want := SubjectOf(ev); want != msg.Subject {
		return nil, Errorf(CodeSubjectMismatch, "event of type %s about %q belongs on subject %s, not %s", ev.Type(), ev.Subject(), want, msg.Subject)
	}
	return ev, nil
}

// DecodeStored decodes a message read back from the log. An event
// published without ce-time takes the time the stream stored it, which is
// itself part of the log, so projections stay deterministic.
func (c *Codec) DecodeStored(raw RawMsg) (*Event, error) {
	ev, err := c.Decode(raw.Msg())
	if err != nil {
		return nil, err
	}
	if !raw.Stored.IsZero() && (ev.Time().IsZero() || ev.Time().After(raw.Stored.Add(FutureTimeSlack))) {
		// Without a time, or with one after the log stored it (a producer's
		// clock, or a ce-time of 9999 that would put a deadline beyond
		// what a schedule can hold): the stored time, which every reader
		// of the log reads alike.
		ev.SetTime(raw.Stored.UTC())
	}
	return ev, nil
}

// FutureTimeSlack is how far after the time the log stored it an event's
// own time may be (clocks differ) before a reader takes the stored time
// instead.
const FutureTimeSlack = time.Minute

// DecodeUnchecked parses the wire format without validating the contract.
func DecodeUnchecked(msg *nats.Msg) (*Event, error) { return decodeWire(msg) }

func decodeWire(msg *nats.Msg) (*Event, error) {
	ct := msg.Header.Get(HeaderContentType)
	if strings.HasPrefix(strings.ToLower(ct), ContentTypeStructured) {
		ev := event.New()
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			return nil, Errorf(CodeUndecodable, "structured-mode body is not a CloudEvent in JSON format: %v", err)
		}
		// Hold structured mode to binary mode's rules, so that one event
		// decodes the same in either mode and re-encodes to a message that
		// decodes: binary mode trims the id (sdk-go's setter) and accepts
		// only extension names validExtensionName allows.
		if id := ev.ID(); id != strings.TrimSpace(id) {
			return nil, Errorf(CodeUndecodable, "structured-mode id %q has leading or trailing whitespace", id)
		}
		for name := range ev.Extensions() {
			if !validExtensionName(name) {
				return nil, Errorf(CodeUndecodable, "structured-mode attribute %q is not a valid CloudEvents attribute name (a-z, 0-9, at most 20)", name)
			}
		}
		return &ev, nil
	}
	if err := checkHeaderSize(msg.Header); err != nil {
		return nil, err
	}
	if len(msg.Header) == 0 {
		return nil, Errorf(CodeUndecodable, "no CloudEvents headers: expected binary mode (ce-specversion, ce-id, ce-source, ce-type, ce-subject headers) or Content-Type %s", ContentTypeStructured)
	}
	ev := event.New()
	var seenSpec, seenContentType bool
	for name, values := range msg.Header {
		lower := strings.ToLower(name)
		attr, ok := strings.CutPrefix(lower, HeaderPrefix)
		if !ok || len(values) == 0 {
			continue
		}
		value, err := percentDecode(values[0])
		if err != nil {
			return nil, Errorf(CodeUndecodable, "header %s: %v", name, err)
		}
		// nats.go decodes a message's headers into substrings of one copy
		// of the header block: an attribute kept after the delivery (a
		// run's id in the runner's maps, a confirmation's in the router's)
		// would keep all of it, about 1 KB an event, 10 MB at 10,000 runs
		// waiting. Copy what may be kept; a known type is the catalog's.
		switch attr {
		case "type":
			if t, ok := knownTypeNames[value]; ok {
				value = t
			} else {
				value = strings.Clone(value)
			}
		case "specversion", "time":
		default:
			value = strings.Clone(value)
		}
		switch attr {
		case "specversion":
			seenSpec = true
			if value != SpecVersion {
				return nil, Errorf(CodeUndecodable, "ce-specversion %q is not supported (want %s)", value, SpecVersion)
			}
		case "id":
			ev.SetID(value)
		case "source":
			ev.SetSource(value)
		case "type":
			ev.SetType(value)
		case "subject":
			ev.SetSubject(value)
		case "time":
			t, err := time.Parse(time.RFC3339Nano, value)
			if err != nil {
				return nil, Errorf(CodeUndecodable, "ce-time %q is not RFC 3339: %v", value, err)
			}
			ev.SetTime(t)
		case "dataschema":
			ev.SetDataSchema(value)
		case "datacontenttype":
			seenContentType = true
			ev.SetDataContentType(value)
		default:
			if !validExtensionName(attr) {
				return nil, Errorf(CodeUndecodable, "header %s: %q is not a valid CloudEvents attribute name", name, attr)
			}
			ev.SetExtension(attr, value)
		}
	}
	if !seenSpec {
		return nil, Errorf(CodeUndecodable, "no ce-specversion header: not a binary-mode CloudEvent, and Content-Type %q is not %s", ct, ContentTypeStructured)
	}
	if ct != "" && !seenContentType {
		ev.SetDataContentType(ct)
	}
	if len(msg.Data) > 0 {
		ev.DataEncoded = msg.Data
	}
	return &ev, nil
}

// Header limits: checked before any header is decoded. MaxHeaders and
// MaxHeaderBytes hold for the event's own headers (its ce-* attributes and
// extensions, its content type, Nats-Msg-Id and whatever else a client
// sent); the NATS transport headers that a write adds on the way in
// (Nats-Expected-*, Nats-Batch-*, Nats-Schedul*, Nats-TTL, ...: any other
// Nats-* header) count against limits of their own, so that an event Encode
// accepts is still accepted when read back with the guard, batch or
// schedule headers heed wrote it with. MaxHeaderValue holds for every
// header.
const (
	MaxHeaders     = 64       // headers of one message
	MaxHeaderValue = 4 << 10  // bytes of one header value
	MaxHeaderBytes = 16 << 10 // bytes of all of a message's headers

	MaxTransportHeaders     = 16      // Nats-* headers other than Nats-Msg-Id
	MaxTransportHeaderBytes = 8 << 10 // their bytes, names and values
)

// transportHeader reports whether name is a NATS transport header (Nats-*,
// in any case) other than Nats-Msg-Id, which carries the event's id.
func transportHeader(name string) bool {
	return len(name) > 5 && strings.EqualFold(name[:5], "Nats-") && !strings.EqualFold(name, HeaderMsgID)
}

func checkHeaderSize(h nats.Header) error {
	if len(h) > MaxHeaders+MaxTransportHeaders {
		return Errorf(CodeTooLarge, "%d headers; the limit is %d, and %d NATS transport headers (Nats-*)", len(h), MaxHeaders, MaxTransportHeaders)
	}
	headers, total, transport, transportBytes := 0, 0, 0, 0
	for name, values := range h {
		isTransport := transportHeader(name)
		if isTransport {
			transport++
		} else {
			headers++
		}
		for _, v := range values {
			if len(v) > MaxHeaderValue {
				return Errorf(CodeTooLarge, "header %.64s is %d bytes; the limit is %d", name, len(v), MaxHeaderValue)
			}
			if isTransport {
				transportBytes += len(name) + len(v)
			} else {
				total += len(name) + len(v)
			}
		}
	}
	switch {
	case headers > MaxHeaders:
		return Errorf(CodeTooLarge, "%d headers; the limit is %d", headers, MaxHeaders)
	case total > MaxHeaderBytes:
		return Errorf(CodeTooLarge, "headers are %d bytes; the limit is %d", total, MaxHeaderBytes)
	case transport > MaxTransportHeaders:
		return Errorf(CodeTooLarge, "%d NATS transport headers (Nats-*); the limit is %d", transport, MaxTransportHeaders)
	case transportBytes > MaxTransportHeaderBytes:
		return Errorf(CodeTooLarge, "NATS transport headers (Nats-*) are %d bytes; the limit is %d", transportBytes, MaxTransportHeaderBytes)
	}
	return nil
}

// checkEncodedHeaders holds an event to the header limits as Encode would
// write it: percent-encoding triples every byte outside printable ASCII, so
// a value that arrived raw (or in structured mode, where no header limit
// applies) can grow past MaxHeaderValue. An event heed accepts must
// re-encode to a message heed accepts, so the limits apply to the encoded
// form too.
func checkEncodedHeaders(ev *Event, a *attributes) error {
	exts := ev.Extensions()
	headers, total := 1, len(HeaderMsgID)+len(a.id)
	add := func(name, value string) error {
		n := encodedLen(value)
		if n > MaxHeaderValue {
			return Errorf(CodeTooLarge, "header %s is %d bytes encoded; the limit is %d", name, n, MaxHeaderValue)
		}
		if value != "" {
			headers++
			total += len(name) + n
		}
		return nil
	}
	for _, f := range attributeHeaders(ev, a) {
		if err := add(f.name, f.value); err != nil {
			return err
		}
	}
	if t := ev.Time(); !t.IsZero() {
		headers++
		total += len(headerTime) + maxTimeLen
	}
	for name, v := range exts {
		s, err := types.Format(v)
		if err != nil {
			return Errorf(CodeUndecodable, "extension %s: %v", name, err)
		}
		if err := add(HeaderPrefix+name, s); err != nil {
			return err
		}
	}
	if headers > MaxHeaders {
		return Errorf(CodeTooLarge, "%d headers encoded; the limit is %d", headers, MaxHeaders)
	}
	if total > MaxHeaderBytes {
		// The time was counted at its longest; count it as written before
		// refusing (formatting it on every check costs more than the rest).
		if t := ev.Time(); !t.IsZero() {
			var buf [64]byte
			total += len(t.UTC().AppendFormat(buf[:0], time.RFC3339Nano)) - maxTimeLen
		}
		if total > MaxHeaderBytes {
			return Errorf(CodeTooLarge, "headers are %d bytes encoded; the limit is %d", total, MaxHeaderBytes)
		}
	}
	return nil
}

// maxTimeLen is the longest ce-time Encode writes (RFC 3339 in UTC, with
// nanoseconds; years are 0000-9999).
const maxTimeLen = len("2006-01-02T15:04:05.999999999Z")

// encodedLen is len(percentEncode(s)) without building it.
func encodedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n += 2
		}
	}
	return n
}

func validExtensionName(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// percentEncode escapes what the binding requires: space, '"', '%' and every
// byte outside printable ASCII (UTF-8 is escaped byte by byte).
func percentEncode(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func needsEscape(c byte) bool {
	return c <= 0x20 || c >= 0x7F || c == '"' || c == '%'
}

func percentDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated percent-encoding in %q", s)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("invalid percent-encoding in %q", s)
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

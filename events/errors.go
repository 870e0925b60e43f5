package events

import (
	"errors"
	"fmt"
	"strings"
)

// Code is a stable, machine-readable error code. Codes appear in dead-letter
// headers and command replies; never rename one.
type Code string

const (
	CodeUndecodable      Code = "undecodable"       // not a CloudEvent in binary or structured mode
	CodeMissingAttribute Code = "missing_attribute" // a required CloudEvents attribute is absent or empty
	CodeUnknownType      Code = "unknown_type"      // no schema exists for ce-type
	CodeSchemaViolation  Code = "schema_violation"  // data does not satisfy the type's schema
	CodeSubjectMismatch  Code = "subject_mismatch"  // NATS subject differs from the one type and ce-subject imply
	CodeInvalidID        Code = "invalid_id"        // aggregate id cannot be a subject token
	CodeTooLarge         Code = "too_large"         // event exceeds the size heed accepts
	CodeHandlerFailed    Code = "handler_failed"    // a consumer's handler failed on every delivery
	CodeUnfinished       Code = "unfinished"        // a consumer's handler never finished with it (crash, OOM, kill, ack timeout), MaxDeliver times
	CodePoison           Code = "poison"            // a handler declared the event unprocessable
	CodeConflict         Code = "conflict"          // an optimistic-concurrency expectation failed
	CodeInvalidRequest   Code = "invalid_request"   // a command request failed validation
	CodeNotFound         Code = "not_found"         // the referenced aggregate does not exist
	CodeUnavailable      Code = "unavailable"       // a dependency (NATS, JetStream) is not reachable
	CodeBusy             Code = "busy"              // a service has as many requests in hand as it takes; try again
	CodeInternal         Code = "internal"          // a bug or unexpected failure
	CodeForbidden        Code = "forbidden"         // NATS refused the subject to this identity (its role's permissions)
)

// Error is heed's error as data: a stable code, a human-readable message and
// an optional cause. errors.Is matches on Code, so callers can write
// errors.Is(err, events.ErrSchemaViolation).
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Errorf builds an *Error with a formatted message. A %w verb wraps a cause.
// A cause with the same code is quoted by its message alone, so the code
// is said once ("conflict: run x: already answered", never "conflict: run
// x: conflict: already answered").
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	msg := err.Error()
	for _, a := range args {
		if ae, ok := a.(error); ok && CodeOf(ae) == code {
			msg = strings.Replace(msg, ae.Error(), Message(ae), 1)
		}
	}
	return &Error{Code: code, Message: msg, Err: errors.Unwrap(err)}
}

// Message is err's text without the codes its *Error parts add: what to
// print after "code: " so that a code is never said twice. For a plain
// error it is err.Error().
func Message(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	for cur := err; cur != nil; cur = errors.Unwrap(cur) {
		e, ok := cur.(*Error)
		if !ok {
			continue
		}
		if e.Message == "" {
			// A bare sentinel: its text is only its code.
			s = strings.TrimSuffix(strings.TrimSuffix(s, string(e.Code)), ": ")
			continue
		}
		s = strings.Replace(s, e.Error(), e.Message, 1)
	}
	if s == "" {
		return string(CodeOf(err))
	}
	return s
}

// Sentinels for errors.Is.
var (
	ErrUndecodable      = &Error{Code: CodeUndecodable}
	ErrMissingAttribute = &Error{Code: CodeMissingAttribute}
	ErrUnknownType      = &Error{Code: CodeUnknownType}
	ErrSchemaViolation  = &Error{Code: CodeSchemaViolation}
	ErrSubjectMismatch  = &Error{Code: CodeSubjectMismatch}
	ErrInvalidID        = &Error{Code: CodeInvalidID}
	ErrTooLarge         = &Error{Code: CodeTooLarge}
	ErrHandlerFailed    = &Error{Code: CodeHandlerFailed}
	ErrUnfinished       = &Error{Code: CodeUnfinished}
	ErrPoison           = &Error{Code: CodePoison}
	ErrConflict         = &Error{Code: CodeConflict}
	// ErrStaleRead is the conflict of a write whose expected last sequence
	// no longer holds: someone appended to the aggregate since the writer
	// read it. Read again and decide again (RetryStale).
	ErrStaleRead      = errors.New("the aggregate changed since it was read")
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest}
	ErrNotFound       = &Error{Code: CodeNotFound}
	ErrUnavailable    = &Error{Code: CodeUnavailable}
	ErrBusy           = &Error{Code: CodeBusy}
	ErrInternal       = &Error{Code: CodeInternal}
	ErrForbidden      = &Error{Code: CodeForbidden}
)

// CodeOf returns the code of the first *Error in err's chain, or
// CodeInternal when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Poison marks err as permanent: the consumer sends the event to the
// dead-letter subject at once instead of retrying it.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: CodePoison, Message: err.Error(), Err: err}
}

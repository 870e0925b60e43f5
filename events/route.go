package events

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// Routes dispatch each event to the typed handler registered for its
// type: the handler gets the event's data decoded into the type's Go data
// type (the consumer has validated it against the schema already). Events
// of a type without a route are acknowledged and left alone.
type Routes struct {
	handlers map[Type]Handler
}

// NewRoutes returns empty routes.
func NewRoutes() *Routes { return &Routes{handlers: map[Type]Handler{}} }

// On routes events of type t to fn. T must be t's data type (DataType):
// a mismatch is a programming error and panics at registration, where any
// test finds it.
func On[T any](r *Routes, t Type, fn func(ctx context.Context, d *Delivery, data *T) ([]Event, error)) {
	mustMatch[T](t)
	r.handlers[t] = func(ctx context.Context, d *Delivery) ([]Event, error) {
		var data T
		if err := json.Unmarshal(d.Event.Data(), &data); err != nil {
			return nil, Poison(fmt.Errorf("%s data does not decode: %w", t, err))
		}
		return fn(ctx, d, &data)
	}
}

func mustMatch[T any](t Type) {
	want, ok := DataType(t)
	if got := reflect.TypeFor[T](); !ok || got != want {
		panic(fmt.Sprintf("events: a route for %s takes %v; its data type is %v", t, got, want))
	}
}

// Handle is the Handler of the routes.
func (r *Routes) Handle(ctx context.Context, d *Delivery) ([]Event, error) {
	h, ok := r.handlers[Type(d.Event.Type())]
	if !ok {
		return nil, nil
	}
	return h(ctx, d)
}

// Types are the routed types, sorted.
func (r *Routes) Types() []Type {
	out := make([]Type, 0, len(r.handlers))
	for t := range r.handlers {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ProjectionRoutes are Routes for a projection: each event type folds into
// the store with its own typed function.
type ProjectionRoutes struct {
	appliers map[Type]func(ctx context.Context, s Store, ev *Event) error
}

// NewProjectionRoutes returns empty projection routes.
func NewProjectionRoutes() *ProjectionRoutes {
	return &ProjectionRoutes{appliers: map[Type]func(context.Context, Store, *Event) error{}}
}

// Fold routes events of type t to fn, as On does.
func Fold[T any](r *ProjectionRoutes, t Type, fn func(ctx context.Context, s Store, ev *Event, data *T) error) {
	mustMatch[T](t)
	r.appliers[t] = func(ctx context.Context, s Store, ev *Event) error {
		var data T
		if err := json.Unmarshal(ev.Data(), &data); err != nil {
			return Poison(fmt.Errorf("%s data does not decode: %w", t, err))
		}
		return fn(ctx, s, ev, &data)
	}
}

// Apply folds one event with the function routed for its type; other
// types leave the store as it is.
func (r *ProjectionRoutes) Apply(ctx context.Context, s Store, ev *Event) error {
	if fn, ok := r.appliers[Type(ev.Type())]; ok {
		return fn(ctx, s, ev)
	}
	return nil
}

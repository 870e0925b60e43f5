package events

import "testing"

func BenchmarkValidate(b *testing.B) {
	v, err := NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"step":"deploy","index":3,"attempt":1,"output":"deployed web-7f9c to production: 3/3 replicas healthy, rollout complete. deployed web-7f9c to production: 3/3 replicas healthy, rollout complete. deployed web-7f9c to production: 3/3 replicas hea","duration_ms":12.5}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Validate(RunStepCompleted, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		s := v.schemaOf(b, RunStepCompleted)
		for b.Loop() {
			if err := validateFull(RunStepCompleted, s, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

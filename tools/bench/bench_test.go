package main

import (
	"testing"
	"time"

	"github.com/heedhq/heed/events"
)

func TestStepCompletedDataIsValidAndSized(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	codec := events.NewCodec(v)
	for _, size := range []int{256, 1024, 10} {
		data := stepCompletedData(size)
		if size >= 100 && len(data) != size {
			t.Errorf("size %d: got %d bytes", size, len(data))
		}
		ev, err := events.NewEvent(benchEventType, "bench-r1-heedasync", "bench-r1-heedasync-0", benchSource, data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := codec.Encode(&ev); err != nil {
			t.Errorf("size %d: %v", size, err)
		}
	}
}

func TestStats(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd = %v", got)
	}
	if got := median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("median even = %v", got)
	}
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i))
	}
	if got := percentile(lat, 50); got != 50 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(lat, 99); got != 99 {
		t.Errorf("p99 = %v", got)
	}
	if got := percentile(lat[:1], 99); got != 1 {
		t.Errorf("p99 of one = %v", got)
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSelectSections(t *testing.T) {
	if s, err := selectSections(""); err != nil || len(s) != len(sections) {
		t.Errorf("all: %v %v", len(s), err)
	}
	if s, err := selectSections(" publish "); err != nil || len(s) != 1 || s[0].name != "publish" {
		t.Errorf("publish: %v %v", s, err)
	}
	if _, err := selectSections("publish,nope"); err == nil {
		t.Error("unknown section accepted")
	}
}

package escalator

import (
	"fmt"
	"testing"
)

func TestRecentSetForgetsTheOldest(t *testing.T) {
	s := newRecentSet(3)
	for i := range 4 {
		s.add(fmt.Sprint(i))
	}
	s.add("3") // again: not a new slot
	if s.has("0") {
		t.Error("the oldest of 4 in a set of 3 is still there")
	}
	for _, id := range []string{"1", "2", "3"} {
		if !s.has(id) {
			t.Errorf("%s forgotten", id)
		}
	}
	s.add("4")
	if s.has("1") || !s.has("2") || !s.has("4") {
		t.Errorf("after a fifth: 1 %v, 2 %v, 4 %v; want false, true, true", s.has("1"), s.has("2"), s.has("4"))
	}
}
